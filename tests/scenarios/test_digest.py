"""The spend digest (``[notify.digest]``) on a scenario's database: the daemon's engine enqueues
one short report per period — the same figures ``watchdog-gpu report`` prints for that window —,
once even across a restart, and the delivery job sends it through Apprise."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.helpers import ENFORCE, finish, simulating
from tests.support.http_receiver import HttpReceiver
from watchdog_gpu.cli import EXIT_OK, main
from watchdog_gpu.config import NotifyRoute
from watchdog_gpu.digest import digest_key
from watchdog_gpu.notify.render import format_usd
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.store import fleet_loader
from watchdog_gpu.wiring import build_delivery

# forgotten_idle runs 20:00-21:20 UTC and destroys its instance at 21:00; the digest of 21:10
# covers the day before it, the whole run up to then and the destroy.
DAILY_AT_2110 = ENFORCE + '[notify.digest]\nevery = "daily"\nat = "21:10"\ntimezone = "UTC"\n'


def test_the_daemon_enqueues_one_digest_per_period_with_the_reports_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with simulating("forgotten_idle", tmp_path, DAILY_AT_2110) as sim:
        finish(sim)
        now = sim.clock.now()
        watchdog = sim.assembly.watchdog
        database = sim.store.engine.url.render_as_string(hide_password=False)

        assert watchdog.enqueue_digest(now)
        assert not watchdog.enqueue_digest(now + timedelta(minutes=1))
        sim.restart()  # a new engine on the same database: the outbox remembers the period
        assert not sim.assembly.watchdog.enqueue_digest(now + timedelta(minutes=2))
        sim.assembly.watchdog.deliver(now + timedelta(minutes=2))

        due = now.replace(hour=21, minute=10, second=0, microsecond=0)
        [(_, note)] = [
            (at, n) for at, n in sim.capture.sent if n.idempotency_key == digest_key(due)
        ]
        events = [e for e in sim.store.list_audit_events() if e.kind == "digest"]
        assert [e.data["key"] for e in events] == [digest_key(due)]

        tomorrow = now + timedelta(days=1)
        assert sim.assembly.watchdog.enqueue_digest(tomorrow)  # the next period is new

    assert (
        main(
            [
                "report",
                "--db",
                database,
                "--json",
                "--since",
                (due - timedelta(days=1)).isoformat(),
                "--until",
                due.isoformat(),
            ]
        )
        == EXIT_OK
    )
    report = json.loads(capsys.readouterr().out)
    assert note.severity.value == "info"
    assert note.title == f"Spend digest: {format_usd(report['total']['usd'])} this day"
    assert f"vast-main (vast): {format_usd(report['rows'][0]['usd'])}" in note.body
    assert "1 stop/destroy verified" in note.body
    total = report["total"]
    assert total["idle_usd"] > 0  # half an hour idle before the destroy
    assert (
        f"GPUs idle: {format_usd(total['idle_usd'])} ({total['idle_gpu_hours']:.1f} GPU-h); "
        f"blind {format_usd(total['blind_usd'])}, busy {format_usd(total['busy_usd'])}"
    ) in note.body
    saving = format_usd(report["estimated_saving_usd"])
    assert f"estimated saving to the period's end {saving} (an estimate" in note.body


def test_the_digest_reaches_a_phone_through_apprise(tmp_path: Path) -> None:
    with HttpReceiver() as receiver, simulating("forgotten_idle", tmp_path, DAILY_AT_2110) as sim:
        finish(sim)
        now = sim.clock.now()
        route = NotifyRoute(
            url=SecretReference.plain(f"json://127.0.0.1:{receiver.port}/phone"),
            severities=["info"],
        )
        settings = sim.settings.model_copy(
            update={"notify": sim.settings.notify.model_copy(update={"routes": [route]})}
        )
        watchdog = sim.assembly.watchdog
        watchdog.delivery = build_delivery(settings, {})

        assert watchdog.enqueue_digest(now)
        report = watchdog.deliver(now)

        assert report is not None
        [request] = receiver.received("/phone")
        payload = json.loads(request.body)
        assert payload["title"].startswith("Spend digest: $")
        assert "vast-main (vast): $" in payload["message"]
        assert payload["type"] == "info"


def test_the_digest_reads_its_window_past_the_evaluations_warm_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon's store keeps the evaluations' recent samples warm; a view of the digest's
    # window through that cache would narrow it to the digest's instant, and every evaluation
    # after it would read its lookback from the database again.
    histories: list[object] = []
    load = fleet_loader.load_fleet_view

    def spy(*args: Any, **kwargs: Any) -> Any:
        histories.append(kwargs.get("history"))
        return load(*args, **kwargs)

    with simulating("forgotten_idle", tmp_path, DAILY_AT_2110) as sim:
        finish(sim)
        monkeypatch.setattr(fleet_loader, "load_fleet_view", spy)

        assert sim.assembly.watchdog.enqueue_digest(sim.clock.now())

    assert histories == [None]
