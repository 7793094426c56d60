"""idle_gpu: fires at the limit and not before, warns ahead, resets on activity, and never
fires on missing or unknown data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import (
    T0,
    at,
    fleet,
    instance,
    probe,
    probes_every,
    running,
    samples,
    span,
)
from watchdog_gpu.evidence import EVIDENCE_WEAK, account_evidence
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    GpuSample,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Verdict,
)
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig, evaluate, minimum_sample_lookback

CONFIG = IdleGpuConfig()  # 30 min, armed after 20 min, threshold 5 %, 80 %, 3 min gap, warn 10 min


def busy_until(minute: float) -> Callable[[datetime, int], float]:
    """sm 95 % up to ``minute`` (inclusive), 0 afterwards."""
    return lambda moment, _gpu: 95.0 if moment <= at(minute) else 0.0


def forgotten(until: float = 300) -> InstanceView:
    """A job busy for two hours (to minute 120), then idle; sampled every minute."""
    return running(at(0), at(until), samples=samples(at(0), at(until), sm=busy_until(120)))


def findings_at(view: InstanceView, now: datetime, config: IdleGpuConfig = CONFIG) -> list[Finding]:
    return evaluate(fleet(now, view), now, config)


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], InstanceView]
    now: datetime
    episode: datetime | None  # None: no finding expected
    due: datetime | None = None


def _with(
    view: InstanceView,
    extra_samples: Sequence[GpuSample] = (),
    probes: Sequence[ProbeOutcome] | None = None,
) -> InstanceView:
    """``view`` with more samples and/or other probes."""
    merged = sorted([*view.samples, *extra_samples], key=lambda s: (s.at, s.gpu_index))
    return replace(view, samples=tuple(merged), probes=tuple(probes or view.probes))


def _outage_then_idle() -> InstanceView:
    # Busy until 60, SSH down from 60 to 180 (no samples), idle samples from 180 on.
    data = samples(at(0), at(60), sm=95.0) + samples(at(180), at(300), sm=0.0)
    return running(
        at(0), at(300), samples=data, probes=probes_every(at(61), at(179), ProbeStatus.UNREACHABLE)
    )


def _bursty() -> InstanceView:
    # 1 minute busy at the start of every 10 minutes: a data-loader-bound job.
    def pattern(moment: datetime, _gpu: int) -> float:
        return 90.0 if int((moment - T0).total_seconds() // 60) % 10 == 0 else 0.0

    return running(at(0), at(600), samples=samples(at(0), at(600), sm=pattern))


def _restarted() -> InstanceView:
    # Ran busy, was stopped, runs again from 100 with 0 % from the start.
    data = samples(at(0), at(60), sm=95.0) + samples(at(100), at(300), sm=0.0)
    return instance(
        span(InstanceState.RUNNING, at(0), at(60)),
        span(InstanceState.STOPPED, at(61), at(99)),
        span(InstanceState.RUNNING, at(100), at(300)),
        samples=data,
    )


CASES = [
    # The onset is the first idle sample after the last busy one (minute 121 here): the GPU was seen
    # busy at 120, so counting from 120 would count a minute nobody saw idle.
    Case("fires at the limit", forgotten, at(151), at(121), at(151)),
    Case("still the same episode well past the limit", forgotten, at(240), at(121), at(151)),
    Case("warns from warn_before ahead of the limit", forgotten, at(141), at(121), at(151)),
    Case("nothing before the warning window", forgotten, at(140), None),
    Case("nothing while busy", forgotten, at(100), None),
    Case(
        "a busy sample starts a new episode",
        lambda: _with(forgotten(), samples(at(130), at(130), sm=80.0)),
        at(170),
        at(130),
        at(160),
    ),
    Case(
        "activity inside the window prevents the action",
        lambda: _with(forgotten(), samples(at(145), at(145), sm=80.0)),
        at(150),
        None,
    ),
    Case(
        "encoder work keeps a GPU busy while sm is low",
        lambda: _with(forgotten(), samples(at(145), at(145), sm=0.0, enc=40.0)),
        at(160),
        None,
    ),
    Case(
        "utilisation at or under the threshold is idle",
        lambda: running(
            at(0), at(200), samples=samples(at(0), at(200), sm=busy_until(120), enc=3.0)
        ),
        at(151),
        at(121),
        at(151),
    ),
    Case(
        "an interactive login counts as activity",
        lambda: _with(forgotten(), probes=[probe(at(145), interactive_login=True)]),
        at(160),
        None,
    ),
    Case(
        "SSH down: the most recent minutes are blind, no finding",
        lambda: running(at(0), at(200), samples=samples(at(0), at(140), sm=busy_until(120))),
        at(150),
        None,
    ),
    Case(
        "blind for the last 4 minutes: no finding although 80 % of the window is covered",
        lambda: running(at(0), at(200), samples=samples(at(0), at(146), sm=busy_until(120))),
        at(150),
        None,
    ),
    Case(
        "MIG without processes is unknown, never idle",
        lambda: running(
            at(0), at(200), samples=samples(at(0), at(200), sm=None, enc=None, dec=None)
        ),
        at(200),
        None,
    ),
    Case(
        "MIG with processes is busy",
        lambda: running(
            at(0),
            at(200),
            samples=samples(at(0), at(200), sm=None, enc=None, dec=None, verdict=Verdict.BUSY),
        ),
        at(200),
        None,
    ),
    Case(
        "a GPU without samples is unknown",
        lambda: running(
            at(0), at(200), gpu_count=2, samples=samples(at(0), at(200), sm=busy_until(120))
        ),
        at(160),
        None,
    ),
    Case(
        "a second GPU still busy keeps the instance",
        lambda: running(
            at(0),
            at(200),
            gpu_count=2,
            samples=samples(
                at(0), at(200), gpus=(0, 1), sm=lambda m, gpu: 0.0 if gpu == 0 else 70.0
            ),
        ),
        at(160),
        None,
    ),
    Case(
        "every GPU idle on a two-GPU instance",
        lambda: running(
            at(0),
            at(200),
            gpu_count=2,
            samples=samples(at(0), at(200), gpus=(0, 1), sm=busy_until(120)),
        ),
        at(151),
        at(121),
        at(151),
    ),
    Case(
        "samples too sparse to cover the window",
        lambda: running(
            at(0),
            at(300),
            samples=samples(at(0), at(300), every=timedelta(minutes=5), sm=busy_until(120)),
        ),
        at(200),
        None,
    ),
    Case(
        "a missed probe (2-minute gap) is still covered",
        lambda: running(
            at(0),
            at(300),
            samples=samples(at(0), at(300), every=timedelta(minutes=2), sm=busy_until(120)),
        ),
        at(152),
        at(122),
        at(152),
    ),
    Case(
        "provider API readings alone: looks idle (an alert, see below)",
        lambda: running(
            at(0),
            at(200),
            samples=samples(at(0), at(200), sm=busy_until(120), source=SampleSource.PROVIDER_API),
        ),
        at(151),
        at(121),
        at(151),
    ),
    Case(
        "the provider API seeing work resets the dmon idle window",
        lambda: _with(
            forgotten(), samples(at(142), at(142), sm=60.0, source=SampleSource.PROVIDER_API)
        ),
        at(150),
        None,
    ),
    Case("bursty job: never idle", _bursty, at(600), None),
    Case(
        "no activity since start: not armed before arm_after",
        lambda: running(at(0), at(40), samples=samples(at(0), at(40), sm=0.0)),
        at(19),
        None,
    ),
    Case(
        "40 min of 0 % at start-up: armed at 20, warned at 40",
        lambda: running(at(0), at(40), samples=samples(at(0), at(40), sm=0.0)),
        at(40),
        at(20),
        at(50),
    ),
    Case(
        "40 min of 0 % at start-up: not yet in the warning window at 39",
        lambda: running(at(0), at(40), samples=samples(at(0), at(40), sm=0.0)),
        at(39),
        None,
    ),
    Case(
        "activity during start-up arms at once, counting from its end",
        lambda: running(at(0), at(60), samples=samples(at(0), at(60), sm=busy_until(2))),
        at(33),
        at(3),
        at(33),
    ),
    Case("activity before a restart does not arm the new run", _restarted, at(139), None),
    Case("a restarted instance arms after arm_after", _restarted, at(140), at(120), at(150)),
    # Blind time is never idle: the two blind hours count for nothing, the clock starts at the
    # first idle sample after the outage, and the warning comes a full warn_before ahead.
    Case(
        "after an outage the idle clock starts at the first observed idle sample",
        _outage_then_idle,
        at(200),
        at(180),
        at(210),
    ),
    Case("during the outage recovery no finding yet", _outage_then_idle, at(199), None),
    Case(
        "the recovered episode keeps its due time",
        _outage_then_idle,
        at(214),
        at(180),
        at(210),
    ),
    Case(
        "a stopped instance is not this rule's business",
        lambda: instance(
            span(InstanceState.STOPPED, at(0), at(200)), samples=samples(at(0), at(100))
        ),
        at(200),
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_idle_gpu_cases(case: Case) -> None:
    findings = findings_at(case.build(), case.now)
    if case.episode is None:
        assert findings == []
        return
    assert len(findings) == 1
    finding = findings[0]
    assert finding.episode_started_at == case.episode
    assert finding.due_at == case.due


def test_the_finding_carries_the_observed_idle_time_and_dollars() -> None:
    (finding,) = findings_at(forgotten(), at(150))
    assert finding.rule == "idle_gpu"
    assert finding.action is ActionKind.DESTROY
    assert finding.account == "vast-main"
    assert finding.instance_id == "9001"
    assert finding.usd_per_hour_at_stake == pytest.approx(0.52)
    assert finding.evidence["idle_onset"] == at(121).isoformat()
    assert finding.evidence["window_end"] == at(150).isoformat()
    assert finding.evidence["observed_idle_seconds"] == 29 * 60
    assert finding.evidence["blind_seconds"] == 0
    assert finding.evidence["coverage"] == 1.0
    assert finding.evidence["usd_so_far"] == pytest.approx(0.52 * 29 / 60, abs=1e-4)
    assert finding.evidence["armed_by"] == "activity"
    assert finding.evidence["sources"] == "dmon"


def test_a_dmon_burst_every_minute_covers_the_window() -> None:
    # The probe runs `dmon -c 5 -d 1` once a minute: 5 samples a second apart, then a pause.
    bursts = [
        sample
        for minute in range(0, 201)
        for sample in samples(
            at(minute),
            at(minute) + timedelta(seconds=4),
            every=timedelta(seconds=1),
            sm=busy_until(120),
        )
    ]
    (finding,) = findings_at(running(at(0), at(200), samples=bursts), at(151))
    # Busy in the row at 120:00, idle from the row at 120:01: the clock starts there.
    assert finding.episode_started_at == at(120) + timedelta(seconds=1)
    assert finding.due_at == at(150) + timedelta(seconds=1)


def test_the_action_and_threshold_come_from_the_config() -> None:
    config = IdleGpuConfig(action="stop", threshold_percent=50, idle=timedelta(minutes=15))
    data = samples(at(0), at(200), sm=lambda m, _g: 95.0 if m <= at(100) else 30.0)
    (finding,) = findings_at(running(at(0), at(200), samples=data), at(116), config)
    assert finding.action is ActionKind.STOP
    assert finding.episode_started_at == at(101)
    assert finding.due_at == at(116)


def test_the_episode_is_stable_across_ticks() -> None:
    view = forgotten()
    keys = {
        finding.episode_key for now in range(140, 200, 3) for finding in findings_at(view, at(now))
    }
    assert len(keys) == 1


def test_every_running_instance_is_judged_on_its_own() -> None:
    idle = forgotten()
    busy = running(
        at(0), at(300), instance_id="2", samples=samples(at(0), at(300), sm=90.0, instance_id="2")
    )
    findings = evaluate(fleet(at(150), idle, busy), at(150), CONFIG)
    assert [f.instance_id for f in findings] == ["9001"]


def test_a_short_sample_lookback_still_lets_the_action_arrive() -> None:
    # The store loaded only the last 40 minutes of samples: the activity that ended at 120 is
    # out of view. The window is covered and idle, so the action is due — and stays due, tick
    # after tick, instead of being pushed ahead with the sliding lookback.
    full = forgotten(until=400)
    dues = set()
    for now in (300, 310, 320):
        recent = tuple(s for s in full.samples if s.at >= at(now - 40))
        (finding,) = findings_at(replace(full, samples=recent), at(now))
        assert finding.due_at <= at(now)
        dues.add((finding.episode_started_at, finding.due_at))
    assert len(dues) == 1


def test_the_minimum_lookback_spans_arming_idle_window_and_warning() -> None:
    assert minimum_sample_lookback(CONFIG) == timedelta(minutes=20 + 30 + 10 + 3)


def test_an_idle_sample_before_the_activity_does_not_cover_the_busy_moment() -> None:
    data = samples(at(0), at(200), sm=lambda m, _g: 70.0 if m == at(120) else 0.0)
    (finding,) = findings_at(running(at(0), at(200), samples=data), at(150))
    assert finding.episode_started_at == at(121)
    assert finding.evidence["observed_idle_seconds"] == 29 * 60


def _api_only() -> InstanceView:
    return running(
        at(0),
        at(200),
        samples=samples(at(0), at(200), sm=busy_until(120), source=SampleSource.PROVIDER_API),
    )


def test_provider_readings_alone_never_destroy_they_alert() -> None:
    (finding,) = findings_at(_api_only(), at(151))
    assert finding.action is ActionKind.NOTIFY
    assert finding.evidence[EVIDENCE_WEAK] is True
    assert finding.summary.startswith("not destroyed: looks idle per the provider (30m)")


def test_provider_readings_do_not_alert_before_idle_of_apparent_idleness() -> None:
    # A destroy would be warned warn_before ahead; an alert that destroys nothing waits for idle.
    assert findings_at(_api_only(), at(149)) == []


def test_an_account_that_opts_in_is_destroyed_on_the_readings() -> None:
    opted = account_evidence("vast-main", "runpod", ssh=False, idle_evidence="provider_api")
    view = replace(fleet(at(151), _api_only()), evidence={"vast-main": opted})
    (finding,) = evaluate(view, at(151), CONFIG)
    assert finding.action is ActionKind.DESTROY
    assert finding.evidence["sources"] == "provider_api"
    assert EVIDENCE_WEAK not in finding.evidence


def test_dmon_rows_prove_idle_while_the_readings_ride_along() -> None:
    # Both sources idle: the dmon rows alone carry the clock, and the destroy stands.
    view = _with(forgotten(), samples(at(121), at(150), sm=0.0, source=SampleSource.PROVIDER_API))
    (finding,) = findings_at(view, at(150))
    assert finding.action is ActionKind.DESTROY
    assert finding.evidence["sources"] == "dmon"
