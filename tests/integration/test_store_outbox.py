"""The action and notification outboxes: idempotent enqueue, compare-and-set claims."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

from sqlalchemy import Engine, text

from tests.integration.store_builders import (
    T0,
    minutes,
    planned_action,
    planned_notification,
)
from watchdog_gpu.model import ActionKind, ActionResult, ActionStatus
from watchdog_gpu.store import ActionRow, Store


def test_enqueueing_an_action_twice_keeps_the_first_and_says_so(store: Store) -> None:
    assert store.enqueue_action(planned_action("idle_gpu:a/1:t0")) is True
    second = planned_action("idle_gpu:a/1:t0", at=T0 + minutes(5), dry_run=True)

    assert store.enqueue_action(second) is False

    (row,) = store.list_actions()
    assert row.created_at == T0
    assert row.dry_run is False
    assert row.status == ActionStatus.PENDING
    assert row.to_planned() == planned_action("idle_gpu:a/1:t0")


def test_an_action_can_be_recorded_directly_as_dry_run(store: Store) -> None:
    store.enqueue_action(planned_action("k", dry_run=True), status=ActionStatus.DRY_RUN)

    assert store.claim_actions(T0, "executor") == []
    assert store.list_actions(statuses=[ActionStatus.DRY_RUN])[0].dry_run is True


def test_a_claim_takes_pending_actions_oldest_first_and_counts_the_attempt(store: Store) -> None:
    store.enqueue_action(planned_action("late", at=T0 + minutes(1)))
    store.enqueue_action(planned_action("early", at=T0))

    claimed = store.claim_actions(T0 + minutes(2), "executor-1", limit=1)

    assert [row.idempotency_key for row in claimed] == ["early"]
    row = claimed[0]
    assert row.status == ActionStatus.CLAIMED
    assert (row.claimed_by, row.claimed_at, row.claimed_from) == (
        "executor-1",
        T0 + minutes(2),
        ActionStatus.PENDING,
    )
    assert row.attempts == 1
    assert row.kind is ActionKind.DESTROY
    assert row.evidence == {"idle_minutes": 31, "coverage": 0.97, "gpu": "RTX 4090", "armed": True}


def test_a_claimed_action_is_not_claimed_again(store: Store) -> None:
    store.enqueue_action(planned_action("k"))
    store.claim_actions(T0, "executor-1")

    assert store.claim_actions(T0 + minutes(1), "executor-2") == []


def test_two_claimers_in_threads_never_get_the_same_action(store: Store) -> None:
    for number in range(40):
        store.enqueue_action(planned_action(f"action-{number}", at=T0 + timedelta(seconds=number)))
    results: dict[str, list[ActionRow]] = {}
    start = threading.Barrier(4)

    def claim_all(claimer: str) -> None:
        start.wait()
        mine: list[ActionRow] = []
        while batch := store.claim_actions(T0 + minutes(10), claimer, limit=3):
            mine.extend(batch)
        results[claimer] = mine

    threads = [threading.Thread(target=claim_all, args=(f"claimer-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    keys = Counter(row.idempotency_key for rows in results.values() for row in rows)
    assert set(keys) == {f"action-{number}" for number in range(40)}
    assert max(keys.values()) == 1
    owners = {row.idempotency_key: row.claimed_by for row in store.list_actions()}
    for claimer, rows in results.items():
        assert all(owners[row.idempotency_key] == claimer for row in rows)


def test_an_actions_result_is_stored_as_its_string_and_read_back_typed(
    store: Store, store_engine: Engine
) -> None:
    store.enqueue_action(planned_action("k"))
    for result in ActionResult:
        assert store.transition_action(
            "k", ActionStatus.PENDING, ActionStatus.PENDING, T0, result=result
        )
        row = store.get_action("k")
        assert row is not None
        assert row.result is result
        with store_engine.connect() as connection:
            stored = connection.execute(text("SELECT result FROM actions")).scalar_one()
        assert (type(stored), stored) == (str, result.value)


def test_a_transition_is_a_compare_and_set_on_the_status(store: Store) -> None:
    store.enqueue_action(planned_action("k"))
    store.claim_actions(T0, "executor")

    assert store.transition_action("k", ActionStatus.PENDING, ActionStatus.CALLED, T0) is False
    assert store.transition_action(
        "k", ActionStatus.CLAIMED, ActionStatus.CALLED, T0 + minutes(1), result=ActionResult.CALLED
    )
    assert store.transition_action("k", ActionStatus.CLAIMED, ActionStatus.FAILED, T0) is False

    row = store.get_action("k")
    assert row is not None
    assert (row.status, row.result, row.updated_at) == (
        ActionStatus.CALLED,
        ActionResult.CALLED,
        T0 + minutes(1),
    )


def test_an_unverified_action_waits_for_its_next_attempt_before_it_can_be_claimed(
    store: Store,
) -> None:
    store.enqueue_action(planned_action("k"))
    store.claim_actions(T0, "executor")
    store.transition_action(
        "k",
        ActionStatus.CLAIMED,
        ActionStatus.UNVERIFIED,
        T0 + minutes(1),
        last_error="still listed as running",
        next_attempt_at=T0 + minutes(5),
    )
    retry = (ActionStatus.UNVERIFIED,)

    assert store.claim_actions(T0 + minutes(4), "executor", statuses=retry) == []
    (row,) = store.claim_actions(T0 + minutes(5), "executor", statuses=retry)

    assert row.claimed_from == ActionStatus.UNVERIFIED
    assert row.attempts == 2
    assert row.last_error == "still listed as running"


def test_a_claim_left_behind_by_a_crashed_executor_is_reclaimed_after_the_stale_limit(
    store: Store,
) -> None:
    store.enqueue_action(planned_action("k"))
    store.claim_actions(T0, "crashed")
    stale = timedelta(minutes=15)

    assert store.claim_actions(T0 + minutes(14), "next", reclaim_stale_after=stale) == []
    (row,) = store.claim_actions(T0 + minutes(15), "next", reclaim_stale_after=stale)

    assert (row.claimed_by, row.claimed_from, row.attempts) == ("next", ActionStatus.PENDING, 2)


def test_unknown_keys_are_reported_as_absent(store: Store) -> None:
    assert store.get_action("nope") is None
    assert store.transition_action("nope", "pending", "claimed", T0) is False


def test_list_actions_filters_by_status_and_age(store: Store) -> None:
    store.enqueue_action(planned_action("old", at=T0 - timedelta(days=2)))
    store.enqueue_action(planned_action("new", at=T0), status=ActionStatus.BLOCKED)

    assert [row.idempotency_key for row in store.list_actions(since=T0 - minutes(1))] == ["new"]
    assert [row.idempotency_key for row in store.list_actions([ActionStatus.PENDING])] == ["old"]


def test_enqueueing_a_notification_twice_keeps_one(store: Store) -> None:
    assert store.enqueue_notification(planned_notification("warn:k")) is True
    assert store.enqueue_notification(planned_notification("warn:k", at=T0 + minutes(1))) is False

    assert store.notification_backlog() == 1


def test_a_claimed_notification_is_leased_and_not_handed_out_twice(store: Store) -> None:
    store.enqueue_notification(planned_notification("n1"))

    (first,) = store.claim_due_notifications(T0, limit=10)
    assert first.notification == planned_notification("n1")
    assert first.attempts == 0
    assert store.claim_due_notifications(T0 + minutes(1), limit=10) == []
    # The claimer died without marking it: due again after the lease.
    (again,) = store.claim_due_notifications(T0 + minutes(5), limit=10)
    assert again.idempotency_key == "n1"


def test_a_failed_delivery_counts_an_attempt_and_waits_until_its_next_attempt(
    store: Store,
) -> None:
    store.enqueue_notification(planned_notification("n1"))
    store.claim_due_notifications(T0, limit=10)

    store.mark_notification_failed("n1", T0, "HTTP 500 from ntfy", T0 + minutes(2))

    assert store.claim_due_notifications(T0 + minutes(1), limit=10) == []
    (row,) = store.claim_due_notifications(T0 + minutes(2), limit=10)
    assert (row.attempts, row.last_error) == (1, "HTTP 500 from ntfy")
    assert store.notification_backlog() == 1


def test_a_delivered_notification_leaves_the_backlog_for_good(store: Store) -> None:
    store.enqueue_notification(planned_notification("n1"))
    store.enqueue_notification(planned_notification("n2", at=T0 + minutes(1)))
    store.claim_due_notifications(T0 + minutes(1), limit=10)

    store.mark_notification_delivered("n1", T0 + minutes(1))
    store.mark_notification_failed("n1", T0 + minutes(2), "late failure", T0 + minutes(3))

    row = store.get_notification("n1")
    assert row is not None
    assert (row.delivered_at, row.last_error) == (T0 + minutes(1), None)
    assert store.notification_backlog() == 1
    assert [n.idempotency_key for n in store.claim_due_notifications(T0 + minutes(10), 10)] == [
        "n2"
    ]


def test_notifications_not_yet_due_are_not_claimed(store: Store) -> None:
    store.enqueue_notification(planned_notification("future", at=T0 + minutes(30)))

    assert store.claim_due_notifications(T0, limit=10) == []
