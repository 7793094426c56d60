"""max_runtime: a hard TTL, off unless configured, counted conservatively."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from tests.unit.rules.builders import at, fleet, instance, running, span
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig, evaluate, evaluate_timed

TTL = MaxRuntimeConfig(limit=timedelta(hours=48))  # warn_before defaults to 1 h


@dataclass(frozen=True)
class Case:
    name: str
    view: InstanceView
    now: datetime
    config: MaxRuntimeConfig
    since: datetime | None  # None: no finding


def long_job(started_at: datetime | None = None) -> InstanceView:
    return running(at(0), at(0, hours=50), started_at=started_at)


CASES = [
    Case("off unless configured", long_job(), at(0, days=10), MaxRuntimeConfig(), None),
    Case("nothing before the warning window", long_job(), at(-1, hours=47), TTL, None),
    Case("found from warn_before ahead of the limit", long_job(), at(0, hours=47), TTL, at(0)),
    Case("found past the limit", long_job(), at(0, hours=49), TTL, at(0)),
    Case(
        "a later provider start time counts (a restart inside our running span)",
        long_job(started_at=at(0, hours=10)),
        at(0, hours=49),
        TTL,
        None,
    ),
    Case(
        "an earlier provider start time does not make the TTL kill early",
        running(at(0, hours=40), at(0, hours=50), started_at=at(0)),
        at(0, hours=49),
        TTL,
        None,
    ),
    Case(
        "a heartbeat blip with the same provider start is the same run (Vast unknown)",
        instance(
            span(InstanceState.RUNNING, at(0), at(0, hours=30)),
            span(InstanceState.UNKNOWN, at(1, hours=30), at(1, hours=30), compute=None),
            span(InstanceState.RUNNING, at(2, hours=30), at(0, hours=50)),
            started_at=at(-1),
        ),
        at(0, hours=49),
        TTL,
        at(0),
    ),
    Case(
        "blips more often than the limit are still capped",
        instance(
            *(
                span(state, at(minute + offset), at(minute + end), compute=rate)
                for minute in range(0, 50 * 60, 5)
                for state, offset, end, rate in (
                    (InstanceState.RUNNING, 0, 3, 0.5),
                    (InstanceState.UNKNOWN, 4, 4, None),
                )
            ),
            started_at=at(-1),
        ),
        at(0, hours=49),
        TTL,
        at(0),
    ),
    Case(
        "billed start-up counts (a pod RUNNING without a runtime)",
        instance(span(InstanceState.STARTING, at(0), at(0, hours=50))),
        at(0, hours=49),
        TTL,
        at(0),
    ),
    Case(
        "a stopped instance is not running",
        instance(span(InstanceState.STOPPED, at(0), at(0, hours=50))),
        at(0, hours=49),
        TTL,
        None,
    ),
    Case(
        "the run starts again after a stop",
        instance(
            span(InstanceState.RUNNING, at(0), at(0, hours=10)),
            span(InstanceState.STOPPED, at(1, hours=10), at(0, hours=11)),
            span(InstanceState.RUNNING, at(1, hours=11), at(0, hours=60)),
        ),
        at(1, hours=58),
        TTL,
        at(1, hours=11),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_max_runtime_cases(case: Case) -> None:
    findings = evaluate(fleet(case.now, case.view), case.now, case.config)
    if case.since is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.episode_started_at == case.since
    assert case.config.limit is not None
    assert finding.due_at == case.since + case.config.limit


def test_the_evidence_shows_the_limit_and_dollars() -> None:
    (finding,) = evaluate(fleet(at(0, hours=48), long_job()), at(0, hours=48), TTL)
    assert finding.evidence["limit"] == "2d"
    assert finding.evidence["usd_so_far"] == pytest.approx(48 * 0.52)
    assert finding.evidence["running_since"] == at(0).isoformat()


def test_the_rule_says_when_its_warning_point_comes_on_listed_state() -> None:
    # Before the warning point there is no finding for a plan to read a time from: the rule
    # names the earliest one ahead (a wake lists the accounts then), none once it has passed.
    early = running(at(0, hours=2), at(0, hours=50), instance_id="late")
    view = fleet(at(0, hours=40), long_job(), early)
    outcome = evaluate_timed(view, at(0, hours=40), TTL)
    assert outcome.findings == ()
    assert outcome.next_listed == at(0) + TTL.limit - TTL.warn_before  # type: ignore[operator]
    assert outcome.next_change is None  # nothing here waits for streamed rows
    later = evaluate_timed(view, at(30, hours=47), TTL)
    assert [f.instance_id for f in later.findings] == [long_job().latest.instance_id]
    assert later.next_listed == at(0, hours=49)  # the other run's: started 2 h later
    assert evaluate_timed(view, at(0, days=10), MaxRuntimeConfig()).next_listed is None
