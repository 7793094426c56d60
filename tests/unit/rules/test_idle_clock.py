"""The idle clock counts only observed idle time: blind stretches pause it, long ones restart it,
and with streamed rows the onset is the first idle row after the last busy one, to the second."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import T0, at, fleet, running, samples
from watchdog_gpu.model import Finding, GpuSample
from watchdog_gpu.probe.condense import condense_runs
from watchdog_gpu.rules.idle_clock import idle_clock
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig, evaluate

CONFIG = IdleGpuConfig()  # 30 min, warn 10 min, min_coverage 0.8 (blind up to 6 min pauses)
SECOND = timedelta(seconds=1)
LIMIT = timedelta(minutes=30)


def streamed(
    start: datetime,
    end: datetime,
    sm: Callable[[datetime, int], float],
    *,
    gpus: tuple[int, ...] = (0,),
    blind: tuple[tuple[datetime, datetime], ...] = (),
    tick: timedelta = timedelta(minutes=1),
) -> list[GpuSample]:
    """What the streaming probe records: a row a second per GPU (none inside ``blind``),
    condensed into runs per tick, as the tick does."""
    rows = [
        row
        for row in samples(start, end, every=SECOND, gpus=gpus, sm=sm)
        if not any(low <= row.at < high for low, high in blind)
    ]
    recorded: list[GpuSample] = []
    moment = start
    while moment <= end:
        recorded.extend(condense_runs(r for r in rows if moment <= r.at < moment + tick))
        moment += tick
    return recorded


def busy_until(moment: datetime) -> Callable[[datetime, int], float]:
    return lambda at_, _gpu: 90.0 if at_ <= moment else 0.0


def findings(data: list[GpuSample], now: datetime, gpu_count: int | None = None) -> list[Finding]:
    view = running(at(0), now, samples=data, gpu_count=gpu_count)
    return evaluate(fleet(now, view), now, CONFIG)


def first_due(data: list[GpuSample], end: datetime, gpu_count: int | None = None) -> Finding:
    """The finding of the first one-minute tick at which the action is due."""
    now = at(60)
    while now <= end:
        found = findings([s for s in data if s.at <= now], now, gpu_count)
        if found and found[0].due_at <= now:
            return found[0]
        now += timedelta(minutes=1)
    raise AssertionError("never due")


@pytest.mark.parametrize("offset", [0, 1, 17, 29, 43, 59])
def test_streamed_rows_date_the_onset_to_the_second(offset: int) -> None:
    last_busy = at(62) + timedelta(seconds=offset)  # busy stops at an off-tick moment
    data = streamed(at(0), at(140), busy_until(last_busy))
    finding = first_due(data, at(140))
    assert finding.episode_started_at == last_busy + SECOND
    assert finding.due_at == last_busy + SECOND + LIMIT
    assert finding.evidence["blind_seconds"] == 0


def test_the_warning_comes_when_twenty_observed_minutes_are_counted() -> None:
    last_busy = at(62) + timedelta(seconds=37)
    data = streamed(at(0), at(140), busy_until(last_busy))
    onset = last_busy + SECOND
    before = onset + timedelta(minutes=20) - SECOND
    assert findings([s for s in data if s.at <= before], before) == []
    tick = at(83)  # the rows up to 82:59 are recorded
    (warning,) = findings([s for s in data if s.at <= tick], tick)
    # Projected from the tick: the second since the newest row is not counted yet.
    assert warning.due_at == onset + LIMIT + SECOND


def test_ssh_down_for_minutes_mid_idle_pauses_the_clock_by_exactly_that_long() -> None:
    last_busy = at(62) + timedelta(seconds=30)
    blind = (at(75) + timedelta(seconds=12), at(78) + timedelta(seconds=42))  # 3.5 min down
    data = streamed(at(0), at(140), busy_until(last_busy), blind=(blind,))
    finding = first_due(data, at(140))
    onset = last_busy + SECOND
    assert finding.episode_started_at == onset
    # The missing rows are blind; the row before and after the hole are 3.5 min + 1 s apart.
    assert finding.due_at == onset + LIMIT + (blind[1] - blind[0]) + SECOND
    assert finding.evidence["blind_seconds"] == pytest.approx(211, abs=1)


def test_a_blind_stretch_longer_than_the_allowance_restarts_the_clock() -> None:
    last_busy = at(62)
    blind = (at(70), at(80))  # 10 min: more than 30 min x (1 - 0.8)
    data = streamed(at(0), at(160), busy_until(last_busy), blind=(blind,))
    finding = first_due(data, at(160))
    assert finding.episode_started_at == blind[1]
    assert finding.due_at == blind[1] + LIMIT


def test_a_blind_burst_probe_gap_pauses_the_clock_too() -> None:
    # Point samples once a minute; SSH down from 80 to 85 (gaps over max_sample_gap are blind).
    data = [s for s in samples(at(0), at(160), sm=busy_until(at(62))) if not at(80) < s.at < at(85)]
    finding = first_due(data, at(160))
    assert finding.episode_started_at == at(63)
    assert finding.due_at == at(63) + LIMIT + timedelta(minutes=5)


def test_no_destroy_before_idle_minutes_of_observed_idleness_whatever_the_outage() -> None:
    for start, minutes in ((66, 1), (70, 3), (90, 5), (91, 6)):
        blind = (at(start), at(start + minutes))
        data = streamed(at(0), at(170), busy_until(at(62)), blind=(blind,))
        finding = first_due(data, at(170))
        clock = idle_clock(
            {0: [s for s in data if s.at > at(62) and s.verdict.value == "idle"]},
            start=at(62),
            now=finding.due_at,
            max_sample_gap=CONFIG.max_sample_gap,
            restart_after=timedelta(minutes=6),
        )
        assert clock is not None
        assert clock.observed(finding.due_at) >= LIMIT


def test_two_gpus_count_only_when_both_are_observed_idle() -> None:
    def pattern(moment: datetime, gpu: int) -> float:
        return 80.0 if gpu == 1 and moment <= at(64) + timedelta(seconds=5) else 0.0

    # GPU 1's stream has a 2-minute hole the other GPU's rows do not fill.
    rows = samples(at(0), at(140), every=SECOND, gpus=(0, 1), sm=pattern)
    data = condense_runs(r for r in rows if not (r.gpu_index == 1 and at(90) <= r.at < at(92)))
    finding = first_due(list(data), at(140), gpu_count=2)
    onset = at(64) + timedelta(seconds=6)
    assert finding.episode_started_at == onset
    assert finding.due_at == onset + LIMIT + timedelta(minutes=2) + SECOND


def test_a_hole_of_one_missed_row_is_still_observed() -> None:
    rows = samples(at(0), at(140), every=SECOND, sm=busy_until(at(62)))
    data = list(condense_runs(r for r in rows if r.at != at(80)))
    finding = first_due(data, at(140))
    assert finding.due_at == at(62) + SECOND + LIMIT


def test_runs_keep_the_first_idle_row_and_holes() -> None:
    rows = samples(T0, T0 + timedelta(seconds=9), every=SECOND, sm=busy_until(T0 + 3 * SECOND))
    rows = [r for r in rows if r.at != T0 + 6 * SECOND and r.at != T0 + 7 * SECOND]
    runs = condense_runs(rows)
    assert [(r.covers_from, r.at, r.verdict.value) for r in runs] == [
        (T0, T0 + 3 * SECOND, "busy"),
        (T0 + 4 * SECOND, T0 + 5 * SECOND, "idle"),
        (T0 + 8 * SECOND, T0 + 9 * SECOND, "idle"),
    ]
    assert runs[0].sm == 90.0
