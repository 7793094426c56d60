"""What load_fleet_view puts in the FleetView the rules and the planner decide from."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    planned_notification,
    probe,
    sample,
    ssh_key,
    volume,
)
from watchdog_gpu.fleet import ProtectionKind
from watchdog_gpu.model import ActionStatus, InstanceState, ProbeStatus, SampleSource
from watchdog_gpu.store import Store

LOOKBACK = timedelta(hours=1)


def test_samples_and_probes_cover_exactly_the_lookback_window(store: Store) -> None:
    now = T0 + timedelta(hours=3)
    store.record_observation(observation(instance("101")), now)
    # Distinct details: identical outcomes would be one run (test_store_probe_runs.py).
    store.record_probes(
        replace(
            probe("101", at, sample("101", at, 0), sample("101", at, 1, sm=40.0)),
            detail=f"probe at {at:%H:%M}",
        )
        for at in (now + minutes(offset) for offset in (-90, -60, -30, 0))
    )
    # After now (e.g. a clock step): not in the view.
    store.record_probe(probe("101", now + minutes(5), sample("101", now + minutes(5))))

    view = store.load_fleet_view(now, LOOKBACK, now - timedelta(hours=1)).instances[
        f"{ACCOUNT}/101"
    ]

    assert [s.at for s in view.samples] == [now - minutes(60)] * 2 + [now - minutes(30)] * 2 + [
        now
    ] * 2
    assert [s.gpu_index for s in view.samples[:2]] == [0, 1]
    assert view.samples[1].sm == 40.0
    assert view.samples[0].enc == 0.0
    assert view.samples[0].jpg is None  # "-": not available, never zero
    assert [p.at for p in view.probes] == [now - minutes(60), now - minutes(30), now]
    assert view.probes[0].status is ProbeStatus.OK
    assert view.probes[0].samples == ()


def test_samples_recorded_without_a_probe_are_in_the_view(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    api_sample = replace(sample("101", T0, sm=55.0), source=SampleSource.PROVIDER_API)
    store.record_samples([api_sample])

    view = store.load_fleet_view(T0, LOOKBACK, T0).instances[f"{ACCOUNT}/101"]

    assert view.samples == (api_sample,)
    assert view.probes == ()


def test_spans_overlapping_the_spend_period_are_in_the_view_and_older_ones_are_not(
    store: Store,
) -> None:
    paused = instance("101", InstanceState.PAUSED, compute=None)
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(paused), T0 + minutes(10))
    store.record_observation(observation(paused), T0 + timedelta(days=1, hours=1))
    store.record_observation(observation(instance("101")), T0 + timedelta(days=1, hours=2))
    spend_since = T0 + timedelta(days=1)
    now = spend_since + timedelta(hours=3)

    view = store.load_fleet_view(now, LOOKBACK, spend_since).instances[f"{ACCOUNT}/101"]

    # The first running span ended on day 0 and is left out; the paused one reaches into the
    # period, the current running one is inside it.
    assert [(s.state, s.first_seen) for s in view.spans] == [
        (InstanceState.PAUSED, T0 + minutes(10)),
        (InstanceState.RUNNING, T0 + timedelta(days=1, hours=2)),
    ]


def test_the_whole_run_of_the_current_state_is_loaded_even_before_the_spend_period(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101", InstanceState.STOPPED)), T0)
    store.record_observation(
        observation(instance("101", InstanceState.STOPPED)), T0 + timedelta(hours=1)
    )
    store.record_observation(
        observation(instance("101", InstanceState.STOPPED, storage=0.04)), T0 + timedelta(hours=2)
    )
    store.record_observation(
        observation(instance("101", InstanceState.STOPPED, storage=0.04)), T0 + timedelta(days=3)
    )
    now = T0 + timedelta(days=3)

    view = store.load_fleet_view(now, LOOKBACK, spend_since=now - timedelta(hours=1)).instances[
        f"{ACCOUNT}/101"
    ]

    # The 0.02 span ended days before the window but belongs to the stopped run.
    assert [s.storage_usd_per_hour for s in view.spans] == [0.02, 0.04]
    assert view.state_since() == T0


def test_a_gone_instance_stays_in_the_view_while_its_history_reaches_the_window(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(), T0 + minutes(30))

    inside = store.load_fleet_view(T0 + timedelta(hours=5), LOOKBACK, T0)
    outside = store.load_fleet_view(T0 + timedelta(days=2), LOOKBACK, T0 + timedelta(days=1))

    assert inside.instances[f"{ACCOUNT}/101"].state is InstanceState.GONE
    assert f"{ACCOUNT}/101" not in outside.instances


def test_an_instance_that_is_not_gone_is_in_the_view_however_old_its_last_sighting(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101")), T0)
    now = T0 + timedelta(days=10)

    view = store.load_fleet_view(now, LOOKBACK, now - timedelta(days=1))

    assert view.instances[f"{ACCOUNT}/101"].state is InstanceState.RUNNING


def test_configured_accounts_limit_the_view_and_each_gets_an_account_view(store: Store) -> None:
    store.record_observation(observation(instance("101"), ssh_keys=(ssh_key("k1"),)), T0)
    store.record_observation(observation(instance("201", account="retired"), account="retired"), T0)

    view = store.load_fleet_view(
        T0, LOOKBACK, T0, accounts={ACCOUNT: "vast", "lambda-new": "lambda"}
    )

    assert set(view.instances) == {f"{ACCOUNT}/101"}
    assert set(view.accounts) == {ACCOUNT, "lambda-new"}
    assert view.accounts["lambda-new"].latest is None
    assert view.accounts["lambda-new"].provider == "lambda"
    assert view.accounts["lambda-new"].last_poll_ok_at is None
    latest = view.accounts[ACCOUNT].latest
    assert latest is not None
    assert latest.balance_usd == 25.0
    assert [key.key_id for key in view.ssh_keys] == ["k1"]
    assert view.instances_of(ACCOUNT)[0].latest.instance_id == "101"


def test_without_configured_accounts_every_recorded_account_is_in_the_view(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(instance("201", account="other"), account="other"), T0)

    view = store.load_fleet_view(T0, LOOKBACK, T0)

    assert set(view.accounts) == {ACCOUNT, "other"}
    assert set(view.instances) == {f"{ACCOUNT}/101", "other/201"}


def test_volumes_protections_and_active_snoozes_are_in_the_view(store: Store) -> None:
    store.record_observation(observation(volumes=(volume("v1", attached=False),)), T0)
    store.add_protection(ProtectionKind.NAME_GLOB, "*keep*", T0, reason="long training run")
    store.add_protection(ProtectionKind.INSTANCE_ID, "101", T0, account=ACCOUNT)
    store.add_snooze(ACCOUNT, "101", T0 + timedelta(hours=2), T0, reason="finishing an epoch")
    store.add_snooze(ACCOUNT, "102", T0 + minutes(30), T0)

    view = store.load_fleet_view(T0 + timedelta(hours=1), LOOKBACK, T0)

    assert [(v.latest.volume_id, v.detached_since) for v in view.volumes] == [("v1", T0)]
    assert [(p.kind, p.value, p.account) for p in view.protections] == [
        (ProtectionKind.NAME_GLOB, "*keep*", None),
        (ProtectionKind.INSTANCE_ID, "101", ACCOUNT),
    ]
    assert [(s.instance_id, s.until, s.reason) for s in view.snoozes] == [
        ("101", T0 + timedelta(hours=2), "finishing an epoch")
    ]


def test_recent_and_unfinished_actions_and_notification_keys_are_in_the_view(
    store: Store,
) -> None:
    now = T0 + timedelta(days=3)
    store.enqueue_action(planned_action("done-long-ago", at=T0), status=ActionStatus.VERIFIED)
    store.enqueue_action(planned_action("stuck-long-ago", at=T0), status=ActionStatus.UNVERIFIED)
    store.enqueue_action(planned_action("today", at=now - timedelta(hours=2)))
    store.enqueue_notification(planned_notification("old-warning", at=now - timedelta(days=60)))
    store.enqueue_notification(planned_notification("warning", at=now - timedelta(days=6)))

    view = store.load_fleet_view(now, LOOKBACK, now - timedelta(days=1))

    assert [a.idempotency_key for a in view.recent_actions] == ["stuck-long-ago", "today"]
    assert view.recent_actions[0].status == ActionStatus.UNVERIFIED
    assert view.notification_keys == frozenset({"warning"})
