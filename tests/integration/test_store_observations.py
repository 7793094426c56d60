"""Recording polls: instance history spans, gone-on-absence, volumes, SSH keys, poll status."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    ssh_key,
    volume,
)
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import InstanceState
from watchdog_gpu.store import Store
from watchdog_gpu.store.observations import ABSENT_RAW_STATE


def _view(store: Store, now: datetime = T0 + timedelta(days=1)) -> FleetView:
    return store.load_fleet_view(now, timedelta(hours=1), T0 - timedelta(days=1))


def _instance_view(store: Store, instance_id: str) -> InstanceView:
    return _view(store).instances[f"{ACCOUNT}/{instance_id}"]


def test_the_first_observation_opens_one_span_and_records_the_snapshot(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)

    view = _instance_view(store, "101")

    assert view.latest == instance("101")
    assert view.first_seen == T0
    assert [(s.state, s.first_seen, s.last_seen) for s in view.spans] == [
        (InstanceState.RUNNING, T0, T0)
    ]


def test_an_unchanged_observation_extends_the_current_span(store: Store) -> None:
    for tick in range(3):
        store.record_observation(
            observation(instance("101", at=T0 + minutes(tick))), T0 + minutes(tick)
        )

    (span,) = _instance_view(store, "101").spans

    assert (span.first_seen, span.last_seen) == (T0, T0 + minutes(2))
    assert span.compute_usd_per_hour == 0.50


def test_a_change_of_state_opens_a_new_span_and_the_old_one_keeps_its_last_sighting(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(instance("101")), T0 + minutes(1))
    store.record_observation(
        observation(instance("101", InstanceState.PAUSED, compute=None)), T0 + minutes(2)
    )

    view = _instance_view(store, "101")

    assert [(s.state, s.first_seen, s.last_seen) for s in view.spans] == [
        (InstanceState.RUNNING, T0, T0 + minutes(1)),
        (InstanceState.PAUSED, T0 + minutes(2), T0 + minutes(2)),
    ]
    assert view.state is InstanceState.PAUSED
    assert view.state_since() == T0 + minutes(2)


def test_a_change_of_rate_opens_a_new_span_without_resetting_state_since(store: Store) -> None:
    store.record_observation(observation(instance("101", InstanceState.STOPPED)), T0)
    # RunPod doubles the volume rate of a stopped pod.
    store.record_observation(
        observation(instance("101", InstanceState.STOPPED, storage=0.04)), T0 + minutes(5)
    )

    view = _instance_view(store, "101")

    assert [s.storage_usd_per_hour for s in view.spans] == [0.02, 0.04]
    assert view.state_since() == T0
    assert store.latest_instances()[0].state_since == T0


def test_an_instance_missing_from_a_complete_listing_becomes_gone_in_a_new_span(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101"), instance("102")), T0)
    store.record_observation(observation(instance("102")), T0 + minutes(1))

    view = _instance_view(store, "101")

    assert view.state is InstanceState.GONE
    assert view.latest.raw_state == ABSENT_RAW_STATE
    assert [(s.state, s.first_seen) for s in view.spans] == [
        (InstanceState.RUNNING, T0),
        (InstanceState.GONE, T0 + minutes(1)),
    ]
    assert view.spans[-1].billed_usd_per_hour == 0.0
    assert _instance_view(store, "102").state is InstanceState.RUNNING


def test_a_gone_instance_stays_gone_without_new_spans_while_it_stays_absent(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101")), T0)
    for tick in range(1, 4):
        store.record_observation(observation(), T0 + minutes(tick))

    spans = _instance_view(store, "101").spans

    assert [(s.state, s.first_seen, s.last_seen) for s in spans] == [
        (InstanceState.RUNNING, T0, T0),
        (InstanceState.GONE, T0 + minutes(1), T0 + minutes(1)),
    ]


def test_an_instance_that_reappears_after_being_gone_opens_a_new_span(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(), T0 + minutes(1))
    store.record_observation(observation(instance("101")), T0 + minutes(2))

    view = _instance_view(store, "101")

    assert [s.state for s in view.spans] == [
        InstanceState.RUNNING,
        InstanceState.GONE,
        InstanceState.RUNNING,
    ]
    assert view.state_since() == T0 + minutes(2)
    assert view.first_seen == T0


def test_a_gone_instance_forgets_its_pinned_host_key(store: Store) -> None:
    store.record_observation(observation(instance("101"), instance("102")), T0)
    store.pin_host_key(ACCOUNT, "101", "ssh-ed25519", "AAAA101", T0)
    store.pin_host_key(ACCOUNT, "102", "ssh-ed25519", "AAAA102", T0)

    store.record_observation(observation(instance("102")), T0 + minutes(1))

    assert store.get_pinned_host_key(ACCOUNT, "101") is None
    assert store.get_pinned_host_key(ACCOUNT, "102") == ("ssh-ed25519", "AAAA102")


def test_a_listing_of_another_account_is_not_a_listing_of_this_one(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(
        observation(instance("201", account="runpod-lab"), account="runpod-lab"), T0 + minutes(1)
    )

    assert _instance_view(store, "101").state is InstanceState.RUNNING


def test_an_instance_of_another_account_in_an_observation_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="belongs to account"):
        store.record_observation(observation(instance("201", account="other")), T0)

    assert store.latest_instances() == []


def test_a_failed_volume_listing_marks_no_volume_gone(store: Store) -> None:
    store.record_observation(observation(volumes=(volume("v1", attached=False),)), T0)
    store.record_observation(observation(problems={"volumes": "transient: 503"}), T0 + minutes(1))

    (view,) = _view(store).volumes

    assert view.latest.volume_id == "v1"
    assert view.detached_since == T0


def test_a_failed_account_query_keeps_the_last_known_balance(store: Store) -> None:
    store.record_observation(observation(balance=25.0), T0)
    store.record_observation(
        observation(balance=None, problems={"account": "transient: timeout"}), T0 + minutes(1)
    )

    latest = _view(store).accounts[ACCOUNT].latest

    assert latest is not None
    assert latest.balance_usd == 25.0


def test_a_volume_is_detached_since_the_first_detached_sighting_of_the_current_run(
    store: Store,
) -> None:
    store.record_observation(observation(volumes=(volume("v1", attached=True),)), T0)
    store.record_observation(observation(volumes=(volume("v1", attached=False),)), T0 + minutes(1))
    store.record_observation(observation(volumes=(volume("v1", attached=False),)), T0 + minutes(2))

    (view,) = _view(store).volumes
    assert view.detached_since == T0 + minutes(1)
    assert view.first_seen == T0

    store.record_observation(observation(volumes=(volume("v1", attached=True),)), T0 + minutes(3))
    (view,) = _view(store).volumes
    assert view.detached_since is None


def test_a_volume_missing_from_a_complete_listing_leaves_the_view(store: Store) -> None:
    store.record_observation(
        observation(volumes=(volume("v1", attached=False), volume("v2", attached=None))), T0
    )
    store.record_observation(observation(volumes=(volume("v2", attached=None),)), T0 + minutes(1))

    assert [view.latest.volume_id for view in _view(store).volumes] == ["v2"]
    assert _view(store).volumes[0].detached_since is None  # the API does not say: not detached


def test_ssh_keys_follow_the_latest_complete_listing(store: Store) -> None:
    store.record_observation(observation(ssh_keys=(ssh_key("k1"), ssh_key("k2"))), T0)
    store.record_observation(
        observation(ssh_keys=(ssh_key("k2", "/home/me/.ssh/id_ed25519.pub"), ssh_key("k3"))),
        T0 + minutes(1),
    )

    keys = {key.key_id: key.public_key for key in _view(store).ssh_keys}

    assert keys == {"k2": "/home/me/.ssh/id_ed25519.pub", "k3": "ssh-ed25519 AAAAC3Nza user@host"}


def test_a_poll_failure_is_recorded_and_cleared_by_the_next_successful_poll(
    store: Store,
) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_poll_failure(ACCOUNT, "vast", "auth", "401 from /instances", T0 + minutes(1))

    (record,) = store.latest_accounts()
    assert record.view.last_poll_ok_at == T0
    assert record.view.last_poll_error_kind == "auth"
    assert record.view.last_poll_error_at == T0 + minutes(1)
    assert record.last_poll_error_message == "401 from /instances"
    # A failed poll says nothing about the instances.
    assert _instance_view(store, "101").state is InstanceState.RUNNING

    store.record_observation(observation(instance("101")), T0 + minutes(2))
    (record,) = store.latest_accounts()
    assert record.view.last_poll_ok_at == T0 + minutes(2)
    assert record.view.last_poll_error_kind is None


def test_a_poll_failure_of_a_never_polled_account_creates_its_status(store: Store) -> None:
    store.record_poll_failure("lambda-1", "lambda", "transient", "timeout", T0)

    (record,) = store.latest_accounts()

    assert record.view.account == "lambda-1"
    assert record.view.latest is None
    assert record.view.last_poll_ok_at is None
    assert record.view.last_poll_error_kind == "transient"


def test_latest_instances_leave_out_gone_ones_unless_asked(store: Store) -> None:
    store.record_observation(observation(instance("101"), instance("102")), T0)
    store.record_observation(observation(instance("102")), T0 + minutes(1))

    assert [r.snapshot.instance_id for r in store.latest_instances()] == ["102"]
    assert [r.snapshot.instance_id for r in store.latest_instances(include_gone=True)] == [
        "101",
        "102",
    ]


def test_latest_seen_is_the_newest_last_seen_of_a_present_instance(store: Store) -> None:
    """What ``status`` dates its view by: gone instances do not count."""
    assert store.latest_seen() is None
    store.record_observation(observation(instance("101"), instance("102")), T0)
    assert store.latest_seen() == T0
    later = T0 + minutes(1)
    store.record_observation(observation(instance("102", at=later), at=later), later)
    assert store.latest_seen() == later
    store.record_observation(observation(at=T0 + minutes(2)), T0 + minutes(2))  # both gone
    assert store.latest_instances() == []
    assert store.latest_instances(include_gone=True) != []
    assert store.latest_seen() is None


_STATES = st.sampled_from(
    [InstanceState.RUNNING, InstanceState.STOPPED, InstanceState.GONE, InstanceState.UNKNOWN]
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    polls=st.lists(
        st.tuples(
            st.sampled_from([ACCOUNT, "runpod-main"]),
            st.dictionaries(st.sampled_from(["101", "102", "103", "104"]), _STATES, max_size=4),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_instance_count_is_the_number_of_latest_instances(
    store_engine: Engine, polls: list[tuple[str, dict[str, InstanceState]]]
) -> None:
    # The daemon's status line counts instances without building their records: the count of
    # those latest_instances lists (gone ones aside; absent from a listing: gone).
    store = Store(store_engine)
    with store_engine.connect() as connection:  # each example later than the last one
        polled = connection.exec_driver_sql("SELECT count(*) FROM account_snapshots").scalar()
    now = T0 + minutes(polled or 0)
    for account, listed in polls:
        now += minutes(1)
        snapshots = [
            instance(instance_id, state, at=now, account=account)
            for instance_id, state in listed.items()
        ]
        store.record_observation(observation(*snapshots, at=now, account=account), now)
        assert store.instance_count() == len(store.latest_instances())
