"""The spend report's action lines (spend_report.py): what a verified destroy stopped billing."""

from __future__ import annotations

import pytest

from tests.unit.rules.builders import ACCOUNT, INSTANCE, at, instance, span
from watchdog_gpu.fleet import ActionRecord, FleetView
from watchdog_gpu.model import ActionKind, ActionStatus, InstanceState
from watchdog_gpu.spend_report import build_report


def destroy(*, decided: float, accepted: float | None) -> ActionRecord:
    return ActionRecord(
        idempotency_key="k",
        account=ACCOUNT,
        instance_id=INSTANCE,
        rule="idle_gpu",
        kind=ActionKind.DESTROY,
        status=ActionStatus.VERIFIED,
        dry_run=False,
        created_at=at(decided),
        episode_key="e",
        accepted_at=None if accepted is None else at(accepted),
    )


def test_the_estimated_saving_counts_from_the_accepted_call_not_the_decision() -> None:
    # Decided at minute 60, accepted by the provider at 70 (a salvage ran first): the ledger
    # bills the instance up to 70, so the saving must not count those ten minutes again.
    view = instance(
        span(InstanceState.RUNNING, at(0), at(70), compute=3.0, storage=0.0),
        span(InstanceState.GONE, at(71), at(71), compute=0.0, storage=0.0),
    )
    fleet = FleetView(now=at(180), instances={f"{ACCOUNT}/{INSTANCE}": view})
    report = build_report(fleet, [destroy(decided=60, accepted=70)], at(0), at(180), "rule")
    (line,) = report.actions
    assert line.stopped_usd_per_hour == pytest.approx(3.0)
    assert line.estimated_saving_usd == pytest.approx(3.0 * 110 / 60)

    unknown = build_report(fleet, [destroy(decided=60, accepted=None)], at(0), at(180), "rule")
    assert unknown.actions[0].estimated_saving_usd == pytest.approx(3.0 * 2)  # from the decision
