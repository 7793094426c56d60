"""stopped_disk: a stopped instance whose disk keeps billing, timed from when it stopped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import at, fleet, instance, span
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState
from watchdog_gpu.rules.stopped_disk import StoppedDiskConfig, evaluate

RUNNING = InstanceState.RUNNING
STOPPED = InstanceState.STOPPED


def stopped(storage: float | None = 0.05, *, since: float = 100) -> InstanceView:
    return instance(
        span(RUNNING, at(0), at(since - 1)),
        span(STOPPED, at(since), at(since + 60), storage=storage),
        disk_gb=200.0,
    )


@dataclass(frozen=True)
class Case:
    name: str
    view: InstanceView
    now: datetime
    config: StoppedDiskConfig
    due: datetime | None  # None: no finding


DEFAULT = StoppedDiskConfig()
CASES = [
    Case(
        "a stopped, billing disk is due 24 h after the stop",
        stopped(),
        at(101),
        DEFAULT,
        at(100, hours=24),
    ),
    Case(
        "configurable down to minutes",
        stopped(),
        at(101),
        StoppedDiskConfig(after=timedelta(minutes=30)),
        at(130),
    ),
    Case(
        "an unknown storage rate may be billing", stopped(None), at(101), DEFAULT, at(100, hours=24)
    ),
    Case("a disk billed at exactly $0 is left alone", stopped(0.0), at(101), DEFAULT, None),
    Case(
        "a running instance is not this rule's business",
        instance(span(RUNNING, at(0), at(100))),
        at(100),
        DEFAULT,
        None,
    ),
    Case(
        "a paused instance is paused_interruptible's business",
        instance(span(InstanceState.PAUSED, at(0), at(100)), interruptible=True),
        at(100),
        DEFAULT,
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_stopped_disk_cases(case: Case) -> None:
    findings = evaluate(fleet(case.now, case.view), case.now, case.config)
    if case.due is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.episode_started_at == at(100)
    assert finding.due_at == case.due


def test_the_evidence_shows_disk_size_rate_and_dollars_burnt() -> None:
    (finding,) = evaluate(fleet(at(160), stopped(0.2)), at(160), DEFAULT)
    assert finding.evidence["disk_gb"] == 200.0
    assert finding.evidence["storage_usd_per_hour"] == 0.2
    assert finding.evidence["usd_so_far"] == pytest.approx(0.2)
    assert finding.usd_per_hour_at_stake == pytest.approx(0.2)
    assert "$0.200/h" in finding.summary


def test_the_timer_survives_a_rate_change_while_stopped() -> None:
    # RunPod doubles the volume rate when stopped; a price change is not a new stop.
    view = instance(
        span(STOPPED, at(100), at(130), storage=0.1),
        span(STOPPED, at(131), at(200), storage=0.2),
    )
    (finding,) = evaluate(fleet(at(200), view), at(200), DEFAULT)
    assert finding.episode_started_at == at(100)
