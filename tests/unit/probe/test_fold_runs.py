"""A bursty GPU's runs before its last busy one are folded into one busy sample, and the rules
decide exactly as on the unfolded runs (probe/condense.py, ``fold_before_last_busy``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.probe.test_prober import instance as snapshot
from tests.unit.probe.test_prober import make_prober
from tests.unit.rules.builders import ACCOUNT, INSTANCE, fleet, running
from watchdog_gpu.model import GpuSample, ProbeStatus, Verdict
from watchdog_gpu.probe.condense import fold_before_last_busy
from watchdog_gpu.probe.stream_buffer import (
    HostBuffer,
    Metrics,
    ProbeMode,
    StreamHealth,
    StreamState,
    run_samples,
)
from watchdog_gpu.probe.verdicts import metrics_verdict
from watchdog_gpu.rules import idle_gpu, unobserved
from watchdog_gpu.rules.idle_clock import current_idle
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.unobserved import UnobservedConfig

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
THRESHOLD = 5.0
IDLE: Metrics = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def busy(sm: float) -> Metrics:
    return (sm, 10.0, 0.0, 0.0, 0.0, 0.0)


def buffer() -> HostBuffer:
    health = StreamHealth(ProbeMode.STREAM, StreamState.STREAMING, ProbeStatus.OK, T0)
    return HostBuffer(health, capacity=10_000)


def runs_of(rows: Sequence[tuple[int, float, Metrics]]) -> tuple[GpuSample, ...]:
    """(GPU, second after T0, metrics) rows judged as the reader judges them, as runs."""
    host = buffer()
    for gpu, second, metrics in rows:
        host.add_row(gpu, T0.timestamp() + second, verdict_of(metrics), metrics)
    return run_samples(host.take(), account="acct", instance_id="1")


def verdict_of(metrics: Metrics, processes: int | None = None) -> Verdict:
    names = ("sm", "mem", "enc", "dec", "jpg", "ofa")
    values = {name: value for name, value in zip(names, metrics, strict=True) if name != "mem"}
    return metrics_verdict(values, threshold=THRESHOLD, processes=processes)


def shape(sample: GpuSample) -> tuple[object, ...]:
    covers = sample.covers_from
    assert covers is not None
    return (
        sample.gpu_index,
        (covers - T0).total_seconds(),
        (sample.at - T0).total_seconds(),
        sample.verdict,
        sample.sm,
    )


def test_an_inference_gpus_minute_becomes_its_last_busy_stretch_and_what_follows() -> None:
    # Busy one second in four for a minute (a request every 4 s), idle at the end.
    rows = [(0, s, busy(40.0 + s) if s % 4 == 0 else IDLE) for s in range(60)]
    runs = runs_of(rows)
    assert len(runs) == 30

    folded = fold_before_last_busy(runs)

    assert [shape(s) for s in folded] == [
        (0, 0.0, 56.0, Verdict.BUSY, 96.0),  # the maxima; at the last busy row
        (0, 57.0, 59.0, Verdict.IDLE, 0.0),  # the idle clock's onset, to the second
    ]
    assert folded[0].mem == 10.0


def test_a_blind_hole_ends_the_fold() -> None:
    rows = [(0, s, busy(50.0) if s % 2 else IDLE) for s in range(0, 6)]
    rows += [(0, s, busy(50.0) if s % 2 else IDLE) for s in range(10, 16)]  # 5 → 10: blind

    folded = fold_before_last_busy(runs_of(rows))

    assert [shape(s) for s in folded] == [
        *(shape(s) for s in runs_of(rows[:6])),
        (0, 10.0, 15.0, Verdict.BUSY, 50.0),
    ]


def test_a_blind_hole_and_an_unknown_run_are_never_folded_over() -> None:
    unreadable: Metrics = (None, None, None, None, None, None)
    rows = [(0, s, busy(50.0) if s % 2 else IDLE) for s in range(0, 6)]  # 0-5
    rows += [(0, s, busy(50.0) if s % 2 else IDLE) for s in range(10, 16)]  # hole 5 → 10
    rows += [(0, 16, unreadable), (0, 17, unreadable)]
    rows += [(0, s, busy(50.0) if s % 2 else IDLE) for s in range(18, 24)]

    folded = fold_before_last_busy(runs_of(rows))

    assert [shape(s) for s in folded] == [
        *(shape(s) for s in runs_of(rows[:14])),  # the hole, the unknown run and before
        (0, 18.0, 23.0, Verdict.BUSY, 50.0),
    ]


def test_each_gpu_is_folded_on_its_own_and_an_idle_gpu_is_kept_as_it_is() -> None:
    rows = [(0, s, IDLE) for s in range(30)] + [(0, 30, busy(9.0))] + [(0, 31, IDLE)]
    rows += [(1, s, IDLE if s % 3 else busy(70.0)) for s in range(10)]
    rows += [(2, s, IDLE) for s in range(30)]
    runs = runs_of(rows)

    folded = fold_before_last_busy(runs)

    assert [shape(s) for s in folded] == [
        (0, 0.0, 30.0, Verdict.BUSY, 9.0),
        (0, 31.0, 31.0, Verdict.IDLE, 0.0),
        (1, 0.0, 9.0, Verdict.BUSY, 70.0),
        (2, 0.0, 29.0, Verdict.IDLE, 0.0),
    ]
    assert fold_before_last_busy(runs[-1:]) == runs[-1:]


# -- the rules decide the same on folded and unfolded samples --------------------------------

RULE = IdleGpuConfig(
    idle=timedelta(minutes=2),
    arm_after=timedelta(minutes=1),
    threshold_percent=THRESHOLD,
    max_sample_gap=timedelta(seconds=30),
)
BLIND = UnobservedConfig(after=timedelta(seconds=40))
MIG: Metrics = (None, None, None, None, None, None)


@dataclass(frozen=True)
class Second:
    """One second of one GPU: its metrics, compute processes (MIG rows: busy with some), or
    nothing (a hole: the row never came)."""

    metrics: Metrics | None
    processes: int | None = None


seconds = st.one_of(
    st.just(Second(IDLE)),
    st.builds(Second, st.sampled_from([busy(4.0), busy(5.0), busy(5.5), busy(30.0), busy(90.0)])),
    st.just(Second(None)),
    st.builds(Second, st.just(MIG), st.sampled_from([None, 0, 2])),
    st.just(Second((0.0, 0.0, None, 0.0, 0.0, 0.0))),  # an encoder printed as "-": unknown
)


@st.composite
def bursty_streams(draw: st.DrawFn) -> tuple[list[list[Second]], list[int]]:
    """Two GPUs' seconds over up to six minutes, in long idle or busy phases and bursts, and
    the seconds at which the tick takes the buffer."""
    length = draw(st.integers(min_value=30, max_value=360))
    gpus = []
    for _ in range(2):
        own: list[Second] = []
        while len(own) < length:
            kind = draw(st.integers(min_value=0, max_value=3))
            span = draw(st.integers(min_value=1, max_value=90))
            if kind == 0:
                own += [Second(IDLE)] * span
            elif kind == 1:
                own += [draw(seconds)] * span
            else:
                own += draw(st.lists(seconds, min_size=span, max_size=span))
        gpus.append(own[:length])
    takes = sorted(set(draw(st.lists(st.integers(1, length), min_size=1, max_size=8))))
    return gpus, takes


def recorded(gpus: list[list[Second]], takes: list[int], fold: bool) -> list[GpuSample]:
    host, taken = buffer(), 0
    samples: list[GpuSample] = []
    for take in [*takes, len(gpus[0])]:
        for second in range(taken, take):
            for gpu, own in enumerate(gpus):
                row = own[second]
                if row.metrics is not None:
                    at = T0.timestamp() + second + 0.25
                    host.add_row(gpu, at, verdict_of(row.metrics, row.processes), row.metrics)
        taken = take
        runs = run_samples(host.take(), account=ACCOUNT, instance_id=INSTANCE)
        samples += fold_before_last_busy(runs) if fold else runs
    return samples


@settings(max_examples=300, deadline=None)
@given(bursty_streams(), st.integers(min_value=0, max_value=600))
def test_the_rules_decide_the_same_on_folded_samples(
    stream: tuple[list[list[Second]], list[int]], later: int
) -> None:
    gpus, takes = stream
    plain, folded = recorded(gpus, takes, fold=False), recorded(gpus, takes, fold=True)
    assert len(folded) <= len(plain)
    start = T0 - timedelta(minutes=1)
    for now in {T0 + timedelta(seconds=s) for s in [*takes, len(gpus[0]) + later]}:
        views = [
            running(start, now, gpu_count=2, samples=[s for s in kept if s.at <= now])
            for kept in (plain, folded)
        ]
        assert idle_gpu.evaluate(fleet(now, views[1]), now, RULE) == idle_gpu.evaluate(
            fleet(now, views[0]), now, RULE
        )
        assert unobserved.evaluate(fleet(now, views[1]), now, BLIND) == unobserved.evaluate(
            fleet(now, views[0]), now, BLIND
        )
        clocks = [current_idle(view, now, RULE.clock_settings) for view in views]
        assert [c.start if c else None for c in clocks[1:]] == [
            c.start if c else None for c in clocks[:1]
        ]


@settings(max_examples=200, deadline=None)
@given(bursty_streams(), st.integers(min_value=0, max_value=600))
def test_under_a_threshold_raised_since_recording_no_idle_action_comes_earlier(
    stream: tuple[list[list[Second]], list[int]], later: int
) -> None:
    # Recorded at 5 %, judged at 20 %: a folded busy stretch may hold the activity of a run that
    # is idle now, so the idle clock may start later; never earlier.
    raised = RULE.model_copy(update={"threshold_percent": 20.0})
    gpus, takes = stream
    plain, folded = recorded(gpus, takes, fold=False), recorded(gpus, takes, fold=True)
    start = T0 - timedelta(minutes=1)
    for now in {T0 + timedelta(seconds=s) for s in [*takes, len(gpus[0]) + later]}:
        found = [
            idle_gpu.evaluate(
                fleet(
                    now, running(start, now, gpu_count=2, samples=[s for s in kept if s.at <= now])
                ),
                now,
                raised,
            )
            for kept in (plain, folded)
        ]
        if found[1]:
            assert found[0]
            assert found[1][0].due_at >= found[0][0].due_at


def test_a_bursty_gpus_rounds_are_folded_and_read_the_same_while_nothing_changes() -> None:
    prober = make_prober(object())
    host, texts, counts = buffer(), set(), []
    for minute, period in enumerate((4, 7, 3)):  # requests every few seconds, never in step
        for second in range(minute * 60, minute * 60 + 60):
            metrics = busy(60.0) if second % period == 0 else IDLE
            host.add_row(0, T0.timestamp() + second, verdict_of(metrics), metrics)
        outcome = prober.stream_outcome(snapshot(), host.take(), T0 + timedelta(minutes=minute + 1))
        texts.add(outcome.detail)
        counts.append(len(outcome.samples))

    assert texts == {"stream: rows of 1 GPU(s)"}  # one stored outcome row for all three rounds
    assert all(count <= 2 for count in counts)  # the folded busy stretch and the idle tail
