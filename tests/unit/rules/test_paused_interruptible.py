"""paused_interruptible: an outbid/preempted interruptible instance, timed from when it paused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import at, fleet, instance, span
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import ActionKind, InstanceState
from watchdog_gpu.rules.paused_interruptible import PausedInterruptibleConfig, evaluate

RUNNING = InstanceState.RUNNING
PAUSED = InstanceState.PAUSED


def outbid(*, interruptible: bool = True, resumed: bool = False) -> InstanceView:
    spans = [span(RUNNING, at(0), at(59)), span(PAUSED, at(60), at(75), raw_state="outbid")]
    if resumed:
        spans.append(span(RUNNING, at(76), at(80)))
    return instance(*spans, interruptible=interruptible)


@dataclass(frozen=True)
class Case:
    name: str
    view: InstanceView
    now: datetime
    episode: datetime | None
    due: datetime | None = None


CASES = [
    Case(
        "a paused interruptible is found from the moment it paused",
        outbid(),
        at(61),
        at(60),
        at(90),
    ),
    Case("the same episode and due time later on", outbid(), at(120), at(60), at(90)),
    Case(
        "an on-demand instance is not this rule's business",
        outbid(interruptible=False),
        at(120),
        None,
    ),
    Case("a resumed instance is fine", outbid(resumed=True), at(120), None),
    Case(
        "a storage price change while paused does not restart the timer",
        instance(
            span(PAUSED, at(60), at(80), storage=0.02),
            span(PAUSED, at(81), at(100), storage=0.03),
            interruptible=True,
        ),
        at(100),
        at(60),
        at(90),
    ),
    Case(
        "a running interruptible is fine",
        instance(span(RUNNING, at(0), at(100)), interruptible=True),
        at(100),
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_paused_interruptible_cases(case: Case) -> None:
    findings = evaluate(fleet(case.now, case.view), case.now, PausedInterruptibleConfig())
    if case.episode is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.episode_started_at == case.episode
    assert finding.due_at == case.due


def test_the_limit_and_action_come_from_the_config() -> None:
    config = PausedInterruptibleConfig(after=timedelta(minutes=5), action="stop")
    (finding,) = evaluate(fleet(at(70), outbid()), at(70), config)
    assert finding.due_at == at(65)
    assert finding.action is ActionKind.STOP


def test_the_evidence_shows_the_storage_still_billing() -> None:
    (finding,) = evaluate(fleet(at(75), outbid()), at(75), PausedInterruptibleConfig())
    assert finding.usd_per_hour_at_stake == pytest.approx(0.02)
    assert finding.evidence["usd_so_far"] == pytest.approx(0.02 * 15 / 60, abs=1e-4)
    assert finding.evidence["paused_since"] == at(60).isoformat()
    assert finding.evidence["raw_state"] == "outbid"
    assert finding.evidence["disk_gb"] == 50.0
