"""Delivery logic without a network: backoff, the outbox loop, route validation, a crashing
notifier. (Real HTTP delivery is in tests/integration/test_apprise_delivery.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import apprise
import pytest

from tests.support.memory_outbox import MemoryOutbox
from watchdog_gpu.errors import ConfigError
from watchdog_gpu.model import PlannedNotification, Severity
from watchdog_gpu.notify.delivery import (
    AppriseDelivery,
    Backoff,
    DeliveryResult,
    Route,
    deliver_due,
)

NOW = datetime(2026, 12, 2, 22, 20, tzinfo=UTC)


def message(key: str, severity: Severity = Severity.WARNING) -> PlannedNotification:
    return PlannedNotification(
        idempotency_key=key, severity=severity, title=key, body="body", created_at=NOW
    )


class ScriptedDelivery:
    """Fails for the keys in ``failing``; records what it was asked to send."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.sent: list[str] = []
        self.pushes: list[PlannedNotification] = []

    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        keys = [item.idempotency_key for item in notification.items or (notification,)]
        self.sent.extend(keys)
        self.pushes.append(notification)
        if self.failing & set(keys):
            return DeliveryResult(ok=False, detail="FAILURE; connection refused")
        return DeliveryResult(ok=True, detail="SUCCESS")


def test_backoff_doubles_from_the_initial_delay_up_to_the_maximum() -> None:
    backoff = Backoff(initial=timedelta(seconds=30), maximum=timedelta(minutes=5))

    delays = [backoff.delay(failures) for failures in range(1, 8)]

    assert delays == [timedelta(seconds=s) for s in (30, 60, 120, 240, 300, 300, 300)]
    assert backoff.delay(10_000) == timedelta(minutes=5)


def test_one_failing_message_neither_stops_the_others_nor_gets_lost() -> None:
    outbox = MemoryOutbox()
    for key, severity in (("a", Severity.INFO), ("b", Severity.WARNING), ("c", Severity.CRITICAL)):
        outbox.enqueue(message(key, severity))
    delivery = ScriptedDelivery(failing={"b"})
    backoff = Backoff(initial=timedelta(seconds=30), maximum=timedelta(hours=1))

    report = deliver_due(outbox, delivery, NOW, backoff)

    assert (report.delivered, report.failed) == (2, 1)
    assert delivery.sent == ["a", "b", "c"]
    assert outbox.rows["b"].delivered_at is None
    assert outbox.rows["b"].last_error == "FAILURE; connection refused"


def test_the_messages_of_one_pass_and_one_severity_go_out_as_one_push() -> None:
    outbox = MemoryOutbox()
    for key in ("w1", "w2", "w3"):
        outbox.enqueue(
            PlannedNotification(
                idempotency_key=key,
                severity=Severity.WARNING,
                title=f"title {key}",
                body=f"body {key}\nSnooze: watchdog-gpu snooze acct/{key} --for 2h",
                created_at=NOW,
            )
        )
    outbox.enqueue(message("c1", Severity.CRITICAL))
    delivery = ScriptedDelivery(failing=set())

    report = deliver_due(outbox, delivery, NOW, Backoff())

    assert report.delivered == 4
    warnings, critical = delivery.pushes
    assert [item.idempotency_key for item in warnings.items] == ["w1", "w2", "w3"]
    assert warnings.severity is Severity.WARNING
    assert warnings.title.startswith("3 warnings: title w1")
    for key in ("w1", "w2", "w3"):
        assert f"title {key}\nbody {key}\nSnooze: watchdog-gpu snooze acct/{key}" in warnings.body
    assert critical.idempotency_key == "c1"  # alone: sent as it is
    assert critical.items == ()


def test_a_failed_batch_keeps_every_message_it_carried_queued() -> None:
    outbox = MemoryOutbox()
    for key in ("a", "b"):
        outbox.enqueue(message(key))
    delivery = ScriptedDelivery(failing={"b"})

    report = deliver_due(outbox, delivery, NOW, Backoff())

    assert (report.delivered, report.failed) == (0, 2)
    assert outbox.rows["a"].delivered_at is None
    assert outbox.rows["b"].delivered_at is None


def test_each_further_failure_waits_twice_as_long() -> None:
    outbox = MemoryOutbox()
    outbox.enqueue(message("a"))
    delivery = ScriptedDelivery(failing={"a"})
    backoff = Backoff(initial=timedelta(seconds=30), maximum=timedelta(hours=1))
    waits = []

    now = NOW
    for _ in range(4):
        deliver_due(outbox, delivery, now, backoff)
        waits.append(outbox.rows["a"].next_attempt_at - now)
        now = outbox.rows["a"].next_attempt_at

    assert waits == [timedelta(seconds=s) for s in (30, 60, 120, 240)]
    assert outbox.rows["a"].attempts == 4


def test_deliver_due_takes_at_most_the_limit() -> None:
    outbox = MemoryOutbox()
    for key in ("a", "b", "c"):
        outbox.enqueue(message(key))
    delivery = ScriptedDelivery(failing=set())

    report = deliver_due(outbox, delivery, NOW, Backoff(), limit=2)

    assert report.delivered == 2
    assert delivery.sent == ["a", "b"]


def test_invalid_routes_are_all_reported_by_label_without_their_urls() -> None:
    routes = [
        Route("json://127.0.0.1:9/ok", frozenset({Severity.INFO}), label="notify.routes[0]"),
        Route("nosuchscheme://s3cr3tT0ken", frozenset({Severity.INFO}), label="notify.routes[1]"),
        Route("json://127.0.0.1:9/x", frozenset(), label="notify.routes[2]"),
        Route("s3cr3tT0ken-without-scheme", frozenset({Severity.INFO}), label="notify.routes[3]"),
    ]

    with pytest.raises(ConfigError) as raised:
        AppriseDelivery(routes)

    paths = [problem.path for problem in raised.value.problems]
    assert paths == ["notify.routes[1].url", "notify.routes[2].severities", "notify.routes[3].url"]
    assert "nosuchscheme://" in str(raised.value)
    assert "s3cr3tT0ken" not in str(raised.value)


class ExplodingApprise(apprise.Apprise):
    def notify(self, *args: Any, **kwargs: Any) -> apprise.AppriseResult:
        raise RuntimeError("json://user:hunter2hunter2@host/ boom")


def test_a_notifier_that_raises_is_a_failure_result_not_a_crash() -> None:
    delivery = AppriseDelivery(
        [Route("json://127.0.0.1:9/x", frozenset({Severity.WARNING}))],
        apprise_factory=ExplodingApprise,
    )

    result = delivery.deliver(message("a"))

    assert result == DeliveryResult(ok=False, detail="apprise raised RuntimeError")
