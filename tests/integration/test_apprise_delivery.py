"""Apprise delivery over real HTTP on 127.0.0.1: json:// routes to a recording receiver."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.http_receiver import HttpReceiver, free_port
from tests.support.memory_outbox import MemoryOutbox
from watchdog_gpu.config import ConfigError, Settings, load_settings
from watchdog_gpu.log import configure_logging
from watchdog_gpu.model import PlannedNotification, Severity
from watchdog_gpu.notify.delivery import AppriseDelivery, Backoff, Route, deliver_due, notify_test
from watchdog_gpu.store import Store
from watchdog_gpu.wiring import build_delivery

NOW = datetime(2026, 12, 2, 22, 20, tzinfo=UTC)
BACKOFF = Backoff(initial=timedelta(seconds=30), maximum=timedelta(minutes=10))


def message(
    severity: Severity, key: str = "idle_gpu:vast-main/9001:e1:warning"
) -> PlannedNotification:
    return PlannedNotification(
        idempotency_key=key,
        severity=severity,
        title="vast-main/9001 will be destroyed in 10 min: idle_gpu",
        body="Cost: $0.37/h, $2.15 so far\nSnooze: watchdog-gpu snooze vast-main/9001 --for 2h",
        created_at=NOW,
        rule="idle_gpu",
        account="vast-main",
        instance_id="9001",
    )


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver() as running:
        yield running


def route(port: int, path: str, *severities: Severity) -> Route:
    return Route(f"json://127.0.0.1:{port}/{path}", frozenset(severities), label=path)


def test_a_warning_reaches_the_json_endpoint_with_title_message_and_type(
    receiver: HttpReceiver,
) -> None:
    delivery = AppriseDelivery([route(receiver.port, "phone", Severity.WARNING)])

    result = delivery.deliver(message(Severity.WARNING))

    assert result.ok
    assert result.routed
    [request] = receiver.received("/phone")
    assert request.content_type.startswith("application/json")
    payload = json.loads(request.body)
    assert payload["title"] == "vast-main/9001 will be destroyed in 10 min: idle_gpu"
    assert payload["message"].startswith("Cost: $0.37/h, $2.15 so far\n")
    assert payload["type"] == "warning"


def test_severity_routing_sends_critical_only_where_configured(receiver: HttpReceiver) -> None:
    delivery = AppriseDelivery(
        [
            route(receiver.port, "chat", Severity.WARNING),
            route(receiver.port, "pager", Severity.CRITICAL),
            route(receiver.port, "email", Severity.WARNING, Severity.CRITICAL),
        ]
    )

    critical = delivery.deliver(message(Severity.CRITICAL, key="k:action"))
    warning = delivery.deliver(message(Severity.WARNING, key="k:warning"))

    assert critical.ok
    assert warning.ok
    assert [json.loads(r.body)["type"] for r in receiver.received("/pager")] == ["failure"]
    assert [json.loads(r.body)["type"] for r in receiver.received("/chat")] == ["warning"]
    assert len(receiver.received("/email")) == 2


def test_a_dead_receiver_keeps_the_message_queued_until_it_comes_back() -> None:
    port = free_port()
    delivery = AppriseDelivery([route(port, "phone", Severity.WARNING)])
    outbox = MemoryOutbox()
    outbox.enqueue(message(Severity.WARNING))

    first = deliver_due(outbox, delivery, NOW, BACKOFF)

    row = outbox.rows["idle_gpu:vast-main/9001:e1:warning"]
    assert (first.delivered, first.failed) == (0, 1)
    assert row.delivered_at is None
    assert row.attempts == 1
    assert row.next_attempt_at == NOW + timedelta(seconds=30)
    assert row.last_error is not None
    assert row.last_error.startswith("FAILURE")
    # not due yet: nothing is retried before next_attempt_at
    early = deliver_due(outbox, delivery, NOW + timedelta(seconds=10), BACKOFF)
    assert (early.delivered, early.failed) == (0, 0)

    with HttpReceiver(port=port) as back:
        later = deliver_due(outbox, delivery, NOW + timedelta(seconds=30), BACKOFF)
        again = deliver_due(outbox, delivery, NOW + timedelta(minutes=5), BACKOFF)

    assert (later.delivered, later.failed) == (1, 0)
    assert (again.delivered, again.failed) == (0, 0)
    assert row.delivered_at == NOW + timedelta(seconds=30)
    assert len(back.received("/phone")) == 1


def test_an_http_error_is_a_failure() -> None:
    with HttpReceiver(status=500) as broken:
        delivery = AppriseDelivery([route(broken.port, "phone", Severity.WARNING)])
        result = delivery.deliver(message(Severity.WARNING))

    assert not result.ok
    assert "FAILURE" in result.detail
    assert len(broken.received("/phone")) == 1


def test_a_severity_no_route_takes_is_delivered_to_nobody_and_logged_once(
    receiver: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = AppriseDelivery([route(receiver.port, "pager", Severity.CRITICAL)])
    outbox = MemoryOutbox()
    outbox.enqueue(message(Severity.INFO, key="a:resolution"))
    outbox.enqueue(message(Severity.INFO, key="b:resolution"))

    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.notify.delivery"):
        report = deliver_due(outbox, delivery, NOW, BACKOFF)

    assert (report.delivered, report.unrouted, report.failed) == (0, 2, 0)
    assert all(row.delivered_at == NOW for row in outbox.rows.values())
    assert receiver.received() == []
    assert sum("severity=info" in record.getMessage() for record in caplog.records) == 1


def test_route_secrets_never_reach_results_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    secret_route = Route(
        f"json://alice:S3cretPassw0rd@127.0.0.1:{port}/tok3nSecretPath?token=QueryT0ken99",
        frozenset({Severity.CRITICAL}),
        label="notify.routes[0]",
    )
    delivery = AppriseDelivery([secret_route])
    outbox = MemoryOutbox()
    outbox.enqueue(message(Severity.CRITICAL))

    with caplog.at_level(logging.DEBUG, logger="watchdog_gpu"):
        deliver_due(outbox, delivery, NOW, BACKOFF)
        results = notify_test(delivery, NOW)

    row = outbox.rows["idle_gpu:vast-main/9001:e1:warning"]
    texts = [row.last_error or "", caplog.text, repr(secret_route), *map(repr, results)]
    texts.extend(delivery.masked_urls)
    for text in texts:
        for secret in ("S3cretPassw0rd", "tok3nSecretPath", "QueryT0ken99"):
            assert secret not in text
    assert not results[0].ok


def test_notify_test_reports_each_route_whatever_its_severities(receiver: HttpReceiver) -> None:
    dead_port = free_port()
    delivery = AppriseDelivery(
        [
            route(receiver.port, "pager", Severity.CRITICAL),
            route(dead_port, "gone", Severity.INFO),
        ]
    )

    results = notify_test(delivery, NOW)

    assert [(r.label, r.ok) for r in results] == [("pager", True), ("gone", False)]
    assert results[0].severities == frozenset({Severity.CRITICAL})
    assert f"127.0.0.1:{receiver.port}" in results[0].url
    [request] = receiver.received("/pager")
    assert json.loads(request.body)["title"] == "watchdog-gpu test notification"


def test_with_the_real_store_a_failed_message_waits_in_sqlite_and_is_delivered_later(
    store: Store,
) -> None:
    port = free_port()
    delivery = AppriseDelivery([route(port, "phone", Severity.CRITICAL)])
    key = "idle_gpu:vast-main/9001:e1:action"
    store.enqueue_notification(message(Severity.CRITICAL, key=key))

    down = deliver_due(store, delivery, NOW, BACKOFF)
    queued = store.get_notification(key)
    with HttpReceiver(port=port) as back:
        too_early = deliver_due(store, delivery, NOW + timedelta(seconds=29), BACKOFF)
        later = deliver_due(store, delivery, NOW + timedelta(seconds=30), BACKOFF)

    assert (down.failed, too_early.delivered, later.delivered) == (1, 0, 1)
    assert queued is not None
    assert queued.delivered_at is None
    assert queued.attempts == 1
    assert queued.next_attempt_at == NOW + timedelta(seconds=30)
    delivered = store.get_notification(key)
    assert delivered is not None
    assert delivered.delivered_at == NOW + timedelta(seconds=30)
    assert store.notification_backlog() == 0
    [request] = back.received("/phone")
    assert json.loads(request.body)["type"] == "failure"


PATH_TOKEN = "canary-path-token-4d2b9"


@pytest.mark.usefixtures("restore_logging")
def test_at_debug_level_no_library_logs_a_notification_url_token(
    receiver: HttpReceiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Apprise services keep tokens in URL paths and urllib3 logs ``POST /<path>`` at DEBUG: the
    daemon's own set-up (log level debug, the route built by wiring) must leak it nowhere."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[watchdog]\nlog_level = "debug"\n'
        '[[notify.routes]]\nurl = { env = "WD_TEST_NOTIFY_URL" }\nseverities = ["warning"]\n',
        encoding="utf-8",
    )
    environ = {"WD_TEST_NOTIFY_URL": f"json://127.0.0.1:{receiver.port}/{PATH_TOKEN}"}
    settings = load_settings(config, environ)
    stream = io.StringIO()
    configure_logging(settings.watchdog.log_level, "text", stream=stream, environ={})
    delivery = build_delivery(settings, environ)
    assert delivery is not None

    with caplog.at_level(logging.DEBUG):
        quiet = delivery.deliver(message(Severity.WARNING))
        # A user who turns urllib3's logger up anyway still gets the path masked.
        logging.getLogger("urllib3").setLevel(logging.DEBUG)
        loud = delivery.deliver(message(Severity.WARNING))

    assert quiet.ok
    assert loud.ok
    assert len(receiver.received(f"/{PATH_TOKEN}")) == 2  # the token really was in the path
    urllib3_lines = [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]
    assert any('"POST /*** HTTP/1.1" 200' in line for line in urllib3_lines)  # the loud one
    assert PATH_TOKEN not in stream.getvalue()
    assert PATH_TOKEN not in caplog.text


# -- an Apprise config file ---------------------------------------------------------------------


def notify_config(tmp_path: Path, notify: str, environ: dict[str, str] | None = None) -> Settings:
    config = tmp_path / "config.toml"
    config.write_text(f"[notify]\n{notify}\n", encoding="utf-8")
    return load_settings(config, environ or {})


def test_an_apprise_yaml_file_routes_by_its_tags_beside_an_inline_route(
    receiver: HttpReceiver, tmp_path: Path
) -> None:
    (tmp_path / "apprise.yml").write_text(
        "version: 1\n"
        "urls:\n"
        f"  - json://127.0.0.1:{receiver.port}/pager-{PATH_TOKEN}:\n"
        "      tag: critical\n"
        f"  - json://127.0.0.1:{receiver.port}/log:\n"
        "      tag: always\n",
        encoding="utf-8",
    )
    settings = notify_config(
        tmp_path,
        'config = "apprise.yml"\n'
        f'[[notify.routes]]\nurl = "json://127.0.0.1:{receiver.port}/chat"\n'
        'severities = ["warning"]',
    )

    delivery = build_delivery(settings, {})
    assert delivery is not None
    warning = delivery.deliver(message(Severity.WARNING, key="k:warning"))
    critical = delivery.deliver(message(Severity.CRITICAL, key="k:action"))

    assert warning.ok
    assert critical.ok
    assert [json.loads(r.body)["type"] for r in receiver.received(f"/pager-{PATH_TOKEN}")] == [
        "failure"
    ]
    assert len(receiver.received("/chat")) == 1
    assert len(receiver.received("/log")) == 2  # "always" takes every severity
    assert not any(PATH_TOKEN in url for url in delivery.masked_urls)
    assert PATH_TOKEN not in critical.detail


def test_a_text_config_given_as_a_secret_reference_is_delivered_and_tested(
    receiver: HttpReceiver, tmp_path: Path
) -> None:
    text = f"warning,critical=json://127.0.0.1:{receiver.port}/{PATH_TOKEN}\n"
    settings = notify_config(
        tmp_path, 'config = { env = "WD_TEST_APPRISE_CONFIG" }', {"WD_TEST_APPRISE_CONFIG": text}
    )

    delivery = build_delivery(settings, {"WD_TEST_APPRISE_CONFIG": text})
    assert delivery is not None
    info = delivery.deliver(message(Severity.INFO, key="k:resolution"))
    results = notify_test(delivery, NOW)

    assert (info.ok, info.routed) == (True, False)  # tagged warning and critical only
    [result] = results
    assert (result.label, result.ok) == ("notify.config[0]", True)
    assert result.severities == frozenset({Severity.WARNING, Severity.CRITICAL})
    assert PATH_TOKEN not in result.url
    assert "overflow=upstream" in result.url  # Apprise's own defaults stay readable
    [request] = receiver.received(f"/{PATH_TOKEN}")
    assert json.loads(request.body)["title"] == "watchdog-gpu test notification"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("json://127.0.0.1:9/untagged-canary-77\n", "#1 (json://) has no tag among info"),
        ("version: 1\nurls:\n  - json://127.0.0.1:9/x:\n      tag: ops\n", "#1 (json://)"),
        ("::: neither yaml nor text :::\n", "not an Apprise config file"),
    ],
    ids=["untagged", "unknown-tag-only", "garbage"],
)
def test_an_unusable_apprise_config_is_a_config_error_naming_no_url(
    tmp_path: Path, content: str, expected: str
) -> None:
    (tmp_path / "apprise.txt").write_text(content, encoding="utf-8")
    settings = notify_config(tmp_path, 'config = "apprise.txt"')

    with pytest.raises(ConfigError) as caught:
        build_delivery(settings, {})

    [problem] = caught.value.problems
    assert problem.path == "notify.config"
    assert expected in problem.message
    assert "canary" not in problem.message


def test_a_missing_apprise_config_file_is_a_config_error(tmp_path: Path) -> None:
    settings = notify_config(tmp_path, 'config = "nowhere.yml"')

    with pytest.raises(ConfigError) as caught:
        build_delivery(settings, {})

    [problem] = caught.value.problems
    assert problem.path == "notify.config"
    assert "nowhere.yml" in problem.message
