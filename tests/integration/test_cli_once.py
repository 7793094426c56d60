"""``watchdog-gpu once``: one real tick against the simulated Vast dialect on loopback HTTP.

The account's ``api_url`` points at ``watchdog_gpu.sim`` servers serving the three-providers
scenario; the database is a real SQLite file. A stopped H100 (vast-a/9004) recorded as stopped
for two days is past ``stopped_disk``'s 24 hours, so one tick destroys it — unless it is a dry
run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import Result, freeze_clock, isolate, run, write_config
from tests.integration.sshd import write_ed25519_key
from tests.integration.store_builders import instance, observation, planned_action
from tests.support.http_receiver import HttpReceiver
from tests.support.sim_world import ServedWorld, served_world
from watchdog_gpu.model import ActionStatus, InstanceState, PlannedNotification, Severity
from watchdog_gpu.store import Store
from watchdog_gpu.store.lock import database_lock

NOW = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
ACCOUNT = "vast-a"
KEY_VARIABLE = "SIM_VAST_A_KEY"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch, NOW)
    monkeypatch.setenv(KEY_VARIABLE, "sim-vast-a")


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    """vast-a/9004 recorded as stopped since two days before NOW."""
    since = NOW - timedelta(days=2)
    stopped = instance("9004", InstanceState.STOPPED, account=ACCOUNT, at=since, compute=1.6)
    store.record_observation(observation(stopped, account=ACCOUNT, at=since), since)
    return tmp_path / "watchdog-gpu.db"


def config_for(tmp_path: Path, db: Path, sim: ServedWorld, *, mode: str, extra: str = "") -> Path:
    return write_config(
        tmp_path,
        db,
        f"""
        [probe]
        enabled = false

        [[accounts]]
        name = "{ACCOUNT}"
        provider = "vast"
        api_key = {{ env = "{KEY_VARIABLE}" }}
        api_url = "{sim.url("vast")}"
        retry_budget = "1s"
        {extra}
        """,
        mode=mode,
    )


def api_actions(sim: ServedWorld) -> list[tuple[str, str]]:
    """What was done to the world through its API: (instance id, action)."""
    return [(a.instance_id, a.action) for a in sim.world.actions() if a.source == "api"]


def destroy_requests(sim: ServedWorld) -> int:
    return sum(1 for request in sim.servers.requests("vast") if request.method == "DELETE")


def once(capsys: pytest.CaptureFixture[str], config: Path, *flags: str) -> Result:
    return run(capsys, "once", "--config", str(config), *flags)


def warn(store: Store, at: datetime) -> None:
    """Record the grace warning of 9004's stopped_disk episode as sent at ``at``."""
    episode = f"stopped_disk:{ACCOUNT}/9004:{(NOW - timedelta(days=2)).isoformat()}"
    store.enqueue_notification(
        PlannedNotification(
            idempotency_key=f"{episode}:warning",
            severity=Severity.WARNING,
            title="vast-a/9004 will be destroyed",
            body="",
            created_at=at,
        )
    )


def test_an_enforcing_tick_warns_first_when_no_warning_stands(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for(tmp_path, db, sim, mode="enforce")

    result = once(capsys, config)

    assert result.code == 0, result.err
    assert "decisions: 1 warn" in result.out.splitlines()
    assert api_actions(sim) == []
    assert store.list_actions() == []
    kinds = [event.kind for event in store.list_audit_events(instance_id="9004")]
    assert kinds == ["warning"]


def test_an_enforcing_tick_destroys_the_instance_past_its_limit_and_records_it(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for(tmp_path, db, sim, mode="enforce")
    warn(store, NOW - timedelta(hours=2))

    result = once(capsys, config)

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "tick at 2026-03-03 12:00:00 UTC"
    assert "accounts: 1 polled ok, 0 failed" in lines
    assert "  execute: destroy vast-a/9004 (stopped_disk)" in lines
    assert "actions: 1 called" in lines
    assert lines[-1] == "result: healthy"
    assert api_actions(sim) == [("9004", "destroy")]
    [action] = store.list_actions()
    assert (action.instance_id, action.status, action.dry_run) == ("9004", "called", False)
    kinds = [event.kind for event in store.list_audit_events(instance_id="9004")]
    assert kinds == ["action_planned", "provider_called"]
    # Every listed instance was recorded by the poll.
    recorded = {record.snapshot.instance_id for record in store.latest_instances()}
    assert recorded == {"9001", "9002", "9003", "9004"}


def test_a_dry_run_of_an_enforcing_configuration_changes_nothing_anywhere(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    warn(store, NOW - timedelta(hours=2))
    config = config_for(tmp_path, db, sim, mode="enforce")

    result = once(capsys, config, "--dry-run")

    assert result.code == 0, result.err
    assert "note: dry run on a copy of the database" in result.out
    assert "  execute: destroy (dry run) vast-a/9004 (stopped_disk)" in result.out
    assert "actions: 1 dry_run" in result.out
    assert api_actions(sim) == []
    assert destroy_requests(sim) == 0
    # The real database was not touched: a recorded dry-run action would count as the episode's
    # action and keep the daemon from enforcing it later.
    assert store.list_actions() == []
    assert store.list_audit_events() == []
    assert {r.snapshot.instance_id for r in store.latest_instances()} == {"9004"}

    enforced = once(capsys, config)

    assert "  execute: destroy vast-a/9004 (stopped_disk)" in enforced.out
    assert api_actions(sim) == [("9004", "destroy")]


def test_a_dry_run_overrides_a_rule_that_enforces_on_its_own(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    warn(store, NOW - timedelta(hours=2))
    config = config_for(
        tmp_path, db, sim, mode="monitor", extra='\n[rules.stopped_disk]\nmode = "enforce"\n'
    )

    result = once(capsys, config, "--dry-run")

    assert result.code == 0, result.err
    assert "destroy (dry run) vast-a/9004" in result.out
    assert api_actions(sim) == []


def test_a_dry_run_of_the_shipped_monitor_mode_has_no_side_effects(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    # Monitor mode is the shipped default: a dry run there used to be the ordinary tick, which
    # took the lock a running daemon holds, recorded the tick and pushed real messages.
    warn(store, NOW - timedelta(hours=2))
    with HttpReceiver() as receiver:
        config = config_for(
            tmp_path,
            db,
            sim,
            mode="monitor",
            extra=f'\n[[notify.routes]]\nurl = "json://127.0.0.1:{receiver.port}/phone"\n',
        )
        daemon = database_lock(f"sqlite:///{db}", role="daemon")
        daemon.acquire()
        try:
            result = once(capsys, config, "--dry-run")
        finally:
            daemon.release()

        assert result.code == 0, result.err
        assert "note: dry run on a copy of the database" in result.out
        assert "  execute: destroy (dry run) vast-a/9004 (stopped_disk)" in result.out
        assert "notifications: none sent (dry run on a copy)" in result.out
        assert receiver.requests == []
    assert api_actions(sim) == []
    assert store.list_actions() == []
    assert store.list_audit_events() == []
    assert store.notification_backlog() == 1  # only the warning queued before, still queued
    assert {r.snapshot.instance_id for r in store.latest_instances()} == {"9004"}


def test_a_dry_run_leaves_actions_planned_for_real_alone(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    # An enforcing daemon planned a destroy and has not carried it out yet.
    store.enqueue_action(planned_action("real:9004:destroy", at=NOW, instance_id="9004"))
    config = config_for(tmp_path, db, sim, mode="monitor")

    result = once(capsys, config, "--dry-run")

    assert result.code == 0, result.err
    assert "1 action(s) planned earlier for real are not finished" in result.out
    assert "actions: executor not run" in result.out
    assert api_actions(sim) == []
    assert destroy_requests(sim) == 0
    real = store.get_action("real:9004:destroy")
    assert real is not None
    assert real.status == ActionStatus.PENDING


def test_an_account_that_cannot_be_polled_makes_the_tick_unhealthy_exit_1(
    db: Path,
    tmp_path: Path,
    sim: ServedWorld,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "a-wrong-key")
    config = config_for(tmp_path, db, sim, mode="enforce")

    result = once(capsys, config)

    assert result.code == 1
    assert "accounts: 0 polled ok, 1 failed" in result.out
    assert "  vast-a: FAILED (auth)" in result.out
    assert result.out.splitlines()[-1] == "result: UNHEALTHY"
    assert "a-wrong-key" not in result.out + result.err


def test_missing_secrets_are_exit_2_each_listed(
    db: Path,
    tmp_path: Path,
    sim: ServedWorld,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(KEY_VARIABLE)
    config = config_for(
        tmp_path,
        db,
        sim,
        mode="enforce",
        extra='\n[[notify.routes]]\nurl = { env = "SIM_NOTIFY_URL" }\n',
    )

    result = once(capsys, config)

    assert result.code == 2
    assert "secrets not available (2 problems):" in result.err
    assert f"accounts[0].api_key: secret not available: env {KEY_VARIABLE}" in result.err
    assert "notify.routes[0].url: secret not available: env SIM_NOTIFY_URL" in result.err
    assert sim.servers.requests("vast") == []


def test_an_invalid_configuration_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[watchdog]\nmode = "yolo"\n', encoding="utf-8")

    result = once(capsys, config)

    assert result.code == 2
    assert "watchdog.mode" in result.err


def test_a_tick_whose_probes_all_fail_is_degraded_not_healthy(
    db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    # The probe is on, but no SSH server answers for the simulated running instances.
    key = tmp_path / "id_ed25519"
    write_ed25519_key(key)
    config = config_for(tmp_path, db, sim, mode="monitor").read_text()
    config = config.replace(
        "[probe]\nenabled = false", '[probe]\nenabled = true\nconnect_timeout = "2s"'
    )
    config += f'\n[accounts.ssh]\nkey_file = "{key}"\n'
    path = tmp_path / "probing.toml"
    path.write_text(config)

    text = once(capsys, path)
    as_json = once(capsys, path, "--json")

    assert text.code == 1, text.err
    last = text.out.splitlines()[-1]
    assert last.startswith("result: DEGRADED: ")
    assert "probe(s) failed, so those instances' GPUs are unknown" in last
    assert "\x1b[" not in text.out
    report = json.loads(as_json.out)
    assert as_json.code == 1
    assert report["result"] == "degraded"
    assert report["accounts"] == {ACCOUNT: "ok"}
    assert report["probes"]
    assert all(probe["status"] != "ok" for probe in report["probes"])


def test_json_of_a_healthy_enforcing_tick(
    store: Store, db: Path, tmp_path: Path, sim: ServedWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    warn(store, NOW - timedelta(hours=2))
    result = once(capsys, config_for(tmp_path, db, sim, mode="enforce"), "--json")

    report = json.loads(result.out)
    assert result.code == 0, result.err
    assert report["result"] == "healthy"
    assert report["at"] == "2026-03-03T12:00:00Z"
    assert report["accounts"] == {ACCOUNT: "ok"}
    executed = [d for d in report["decisions"] if d["status"] == "execute"]
    assert [(d["action"], d["subject"], d["rule"]) for d in executed] == [
        ("destroy", f"{ACCOUNT}/9004", "stopped_disk")
    ]
    assert report["actions"] == {"called": 1}
