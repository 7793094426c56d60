"""The ledger's anchor (``instances.billed_from``), recorded with an instance's first row: when
its compute began to bill before that sighting, as the provider dates it, and never before the
account's previous complete listing (docs/safety.md, "Period spend")."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.integration.store_builders import T0, instance, minutes, observation
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.spend import view_billing_pieces
from watchdog_gpu.store import Store


def _pod(
    state: InstanceState = InstanceState.STARTING,
    *,
    at: datetime,
    rented_at: datetime | None,
    started_at: datetime | None = None,
    compute: float = 21.59,
) -> InstanceSnapshot:
    """A RunPod-like pod: a starting one has no start time, only the instant it was rented."""
    return replace(
        instance("pod1", state, at=at, compute=compute, storage=0.0),
        started_at=started_at,
        rented_at=rented_at,
    )


def _view(store: Store, instance_id: str = "pod1") -> InstanceView:
    view = store.load_fleet_view(T0 + timedelta(days=1), timedelta(hours=1), T0 - timedelta(days=7))
    return view.instances[f"vast-main/{instance_id}"]


def test_a_pod_first_listed_starting_is_billed_from_the_instant_it_was_rented(
    store: Store,
) -> None:
    store.record_observation(observation(), T0 - minutes(2))  # the listing before: no pod
    rented = T0 - minutes(1)
    store.record_observation(observation(_pod(at=T0, rented_at=rented)), T0)

    view = _view(store)

    assert view.billed_from == rented
    first = view_billing_pieces(view, until=T0)[0]
    assert (first.start, first.end, first.usd_per_hour) == (rented, T0, 21.59)


def test_a_starting_state_whose_compute_does_not_bill_yet_is_not_anchored(store: Store) -> None:
    store.record_observation(observation(), T0 - minutes(2))
    store.record_observation(observation(_pod(at=T0, rented_at=T0 - minutes(1), compute=0.0)), T0)

    assert _view(store).billed_from is None


def test_a_rented_date_older_than_the_previous_complete_listing_is_clamped_to_it(
    store: Store,
) -> None:
    # A pod rented days ago, stopped and resumed, may still say "Rented by User: <old date>";
    # the listing at T0 did not have it, so it was not billing then.
    store.record_observation(observation(), T0)
    store.record_observation(
        observation(_pod(at=T0 + minutes(2), rented_at=T0 - timedelta(days=3))), T0 + minutes(2)
    )

    assert _view(store).billed_from == T0


def test_the_first_look_at_an_account_takes_no_rent_date_a_resumed_pod_may_carry(
    store: Store,
) -> None:
    # Nothing was listed before: "Rented by User: <three days ago>" may be the first rent of a
    # pod resumed a minute ago. Billing those days would be a guess that can cross a budget
    # ceiling and destroy the account's instances; the bill starts at the sighting instead.
    store.record_observation(observation(_pod(at=T0, rented_at=T0 - timedelta(days=3))), T0)

    assert _view(store).billed_from is None


def test_a_running_instances_start_is_clamped_to_the_previous_complete_listing_too(
    store: Store,
) -> None:
    store.record_observation(observation(), T0 - minutes(10))
    store.record_observation(observation(instance("101")), T0)  # started 50 min before T0

    assert _view(store, "101").billed_from == T0 - minutes(10)


def test_a_failed_poll_is_no_listing_and_an_older_one_does_not_clamp(store: Store) -> None:
    store.record_observation(observation(), T0 - minutes(60))
    store.record_poll_failure("vast-main", "vast", "server", "HTTP 500", T0 - minutes(10))
    store.record_observation(observation(instance("101")), T0)

    assert _view(store, "101").billed_from == T0 - minutes(50)
