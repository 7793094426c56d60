"""unobserved: blind time on a running instance is told, never mistaken for idleness."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import pytest

from tests.unit.rules.builders import at, fleet, instance, probes_every, running, samples, span
from watchdog_gpu.evidence import account_evidence
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import ActionKind, InstanceState, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.rules.unobserved import UnobservedConfig, evaluate

CONFIG = UnobservedConfig()  # 30 minutes


def ssh_down_from(minute: float) -> InstanceView:
    return running(
        at(0),
        at(200),
        samples=samples(at(0), at(minute), sm=80.0),
        probes=probes_every(at(0), at(minute), ProbeStatus.OK)
        + probes_every(at(minute + 1), at(200), ProbeStatus.UNREACHABLE),
    )


@dataclass(frozen=True)
class Case:
    name: str
    view: InstanceView
    now: datetime
    blind_since: datetime | None  # None: no finding


CASES = [
    Case("well observed", ssh_down_from(200), at(200), None),
    Case("blind for less than `after`", ssh_down_from(100), at(129), None),
    Case("blind for `after`", ssh_down_from(100), at(130), at(100)),
    Case("still the same episode", ssh_down_from(100), at(190), at(100)),
    Case(
        "never observed since it started running",
        running(at(0), at(200), probes=probes_every(at(0), at(200), ProbeStatus.AUTH_FAILED)),
        at(30),
        at(0),
    ),
    Case(
        "MIG without processes gives no usable data",
        running(at(0), at(200), samples=samples(at(0), at(200), sm=None, enc=None, dec=None)),
        at(45),
        at(0),
    ),
    Case(
        "MIG with processes is observed",
        running(
            at(0),
            at(200),
            samples=samples(at(0), at(200), sm=None, enc=None, dec=None, verdict=Verdict.BUSY),
        ),
        at(200),
        None,
    ),
    Case(
        "provider API readings that say busy count as observation",
        running(
            at(0),
            at(200),
            samples=samples(at(0), at(200), sm=80.0, source=SampleSource.PROVIDER_API),
        ),
        at(200),
        None,
    ),
    Case(
        "provider API readings that say idle prove nothing: blind",
        running(
            at(0),
            at(200),
            samples=samples(at(0), at(200), sm=0.0, source=SampleSource.PROVIDER_API),
        ),
        at(200),
        at(0),
    ),
    Case(
        "a stopped instance is not blind, it is stopped",
        instance(span(InstanceState.STOPPED, at(0), at(200))),
        at(200),
        None,
    ),
    Case(
        "data from before a restart does not count for the new run",
        instance(
            span(InstanceState.RUNNING, at(0), at(50)),
            span(InstanceState.STOPPED, at(51), at(99)),
            span(InstanceState.RUNNING, at(100), at(200)),
            samples=samples(at(0), at(50), sm=80.0),
        ),
        at(130),
        at(100),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_unobserved_cases(case: Case) -> None:
    findings = evaluate(fleet(case.now, case.view), case.now, CONFIG)
    if case.blind_since is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.action is ActionKind.NOTIFY
    assert finding.episode_started_at == case.blind_since
    assert finding.due_at == case.blind_since + CONFIG.after


def test_the_evidence_says_what_the_probe_saw() -> None:
    view = ssh_down_from(100)
    last = view.probes[-1]
    view = replace(view, probes=(*view.probes[:-1], replace(last, detail="connection refused")))
    (finding,) = evaluate(fleet(at(200), view), at(200), CONFIG)
    assert finding.evidence["last_probe_status"] == "unreachable"
    assert finding.evidence["last_probe_detail"] == "connection refused"
    assert finding.evidence["last_usable_sample_at"] == at(100).isoformat()
    assert finding.evidence["failed_probes"] == 100
    assert "last probe: unreachable" in finding.summary


def test_an_instance_in_an_unmapped_state_is_told_after_the_blind_window() -> None:
    exploded = instance(
        span(InstanceState.RUNNING, at(0), at(10)),
        span(InstanceState.UNKNOWN, at(11), at(120), raw_state="exploded"),
    )
    assert evaluate(fleet(at(40), exploded), at(40), CONFIG) == []
    (finding,) = evaluate(fleet(at(41), exploded), at(41), CONFIG)
    assert finding.action is ActionKind.NOTIFY
    assert finding.episode_started_at == at(11)
    assert "'exploded'" in finding.summary
    assert finding.evidence["provider_state"] == "exploded"
    # The same episode while it lasts.
    (later,) = evaluate(fleet(at(120), exploded), at(120), CONFIG)
    assert later.episode_key == finding.episode_key


def test_an_account_that_lets_the_reading_prove_idle_is_observed_by_it() -> None:
    view = running(
        at(0), at(200), samples=samples(at(0), at(200), sm=0.0, source=SampleSource.PROVIDER_API)
    )
    opted = account_evidence("vast-main", "runpod", ssh=False, idle_evidence="provider_api")
    fleet_view = replace(fleet(at(200), view), evidence={"vast-main": opted})
    assert evaluate(fleet_view, at(200), CONFIG) == []
