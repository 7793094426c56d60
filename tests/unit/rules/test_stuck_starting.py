"""stuck_starting: compute billed outside ``running`` is told once it lasts ``after``."""

from __future__ import annotations

from tests.unit.rules.builders import at, fleet, instance, span
from watchdog_gpu.model import ActionKind, InstanceState
from watchdog_gpu.rules.stuck_starting import StuckStartingConfig, evaluate, evaluate_timed

CONFIG = StuckStartingConfig()  # 15 minutes
STARTING = InstanceState.STARTING


def test_a_starting_instance_billing_compute_is_alerted_from_its_limit_with_its_rate() -> None:
    stuck = instance(
        span(InstanceState.RUNNING, at(0), at(60), compute=0.42, storage=0.01),
        span(STARTING, at(61), at(90), compute=0.42, storage=0.01, raw_state="rebooting"),
    )
    assert evaluate(fleet(at(75), stuck), at(75), CONFIG) == []
    (finding,) = evaluate(fleet(at(76), stuck), at(76), CONFIG)
    assert finding.action is ActionKind.NOTIFY
    assert finding.episode_started_at == at(61)
    assert finding.due_at == at(76)
    assert finding.usd_per_hour_at_stake == 0.43
    assert "$0.430/h" in finding.summary
    assert "rebooting" in finding.summary


def test_the_limit_ahead_is_a_listed_wake_point() -> None:
    stuck = instance(span(STARTING, at(0), at(5), compute=1.99, storage=0.01))
    outcome = evaluate_timed(fleet(at(5), stuck), at(5), CONFIG)
    assert outcome.findings == ()
    assert outcome.next_listed == at(15)


def test_a_starting_state_that_bills_no_compute_yet_is_left_alone() -> None:
    # Vast loading, Lambda booting: the parsers give their compute as $0 (docs/providers.md).
    loading = instance(span(STARTING, at(0), at(600), compute=0.0, storage=0.04))
    assert evaluate(fleet(at(600), loading), at(600), CONFIG) == []


def test_an_unknown_compute_rate_is_not_free() -> None:
    unknown = instance(span(STARTING, at(0), at(30), compute=None, storage=0.01))
    (finding,) = evaluate(fleet(at(30), unknown), at(30), CONFIG)
    assert finding.usd_per_hour_at_stake is None
    assert "an unknown rate" in finding.summary


def test_running_stopped_and_gone_instances_are_not_its_business() -> None:
    views = [
        instance(span(state, at(0), at(600), compute=1.0), instance_id=state.value)
        for state in (InstanceState.RUNNING, InstanceState.STOPPED, InstanceState.GONE)
    ]
    assert evaluate(fleet(at(600), *views), at(600), CONFIG) == []
