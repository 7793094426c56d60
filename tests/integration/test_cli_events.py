"""``watchdog-gpu events``: the audit history from a real SQLite file, as a table or JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli_support import NOW, freeze_clock, isolate, run
from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    planned_notification,
)
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.store import Store


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    return tmp_path / "watchdog-gpu.db"


def record_history(store: Store) -> None:
    """A warning at T0, the destroy planned at T0+30m and called at T0+31m, for vast-main/101;
    a protection event for 102 at T0+90m."""
    store.record_observation(observation(instance("101", at=T0), instance("102", at=T0), at=T0), T0)
    store.record_decision(
        T0,
        audit_kind="warning",
        message="every GPU idle for 20 minutes",
        notification=planned_notification("idle:101:warning", at=T0),
        account=ACCOUNT,
        instance_id="101",
        rule="idle_gpu",
        data={
            "status": "warn",
            "dry_run": True,
            "usd_per_hour": 0.52,
            "evidence.idle_minutes": 20,
            "evidence.coverage": 0.9712,
        },
    )
    planned_at = T0 + minutes(30)
    store.record_decision(
        planned_at,
        audit_kind="action_planned",
        message="destroy planned: every GPU idle for 30 minutes",
        action=planned_action("idle:101:destroy", at=planned_at),
        account=ACCOUNT,
        instance_id="101",
        rule="idle_gpu",
        data={"status": "execute", "dry_run": False, "usd_per_hour": 0.52},
    )
    store.record_action_step(
        "idle:101:destroy",
        ActionStatus.PENDING,
        ActionStatus.CALLED,
        T0 + minutes(31),
        audit_kind="provider_called",
        message="destroy accepted by the provider; verifying",
        data={"action": "destroy", "dry_run": False},
    )
    store.add_audit_event(
        "protection_added",
        T0 + minutes(90),
        account=ACCOUNT,
        instance_id="102",
        message="instance vast-main/102 protected by ops",
    )


def test_the_table_shows_rule_mode_dollars_message_and_evidence_oldest_first(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)

    result = run(capsys, "events", "--db", str(db))

    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["TIME", "EVENT", "INSTANCE", "RULE", "MODE", "$/H", "MESSAGE"]
    assert lines[1].split()[:8] == [
        "2026-03-01",
        "12:00:00",
        "UTC",
        "warning",
        "vast-main/101",
        "idle_gpu",
        "dry-run",
        "$0.52/h",
    ]
    assert lines[1].endswith("every GPU idle for 20 minutes")
    assert lines[2] == "    evidence: idle_minutes=20, coverage=0.9712"
    assert "action_planned" in lines[3]
    assert "enforce" in lines[3]
    assert "provider_called" in lines[4]
    assert "enforce" in lines[4]
    assert "protection_added" in lines[5]
    assert "vast-main/102" in lines[5]
    assert len(lines) == 6


def test_json_lines_carry_the_documented_keys(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)

    result = run(capsys, "events", "--db", str(db), "--json")

    events = [json.loads(line) for line in result.out.splitlines()]
    assert [event["kind"] for event in events] == [
        "warning",
        "action_planned",
        "provider_called",
        "protection_added",
    ]
    warning = events[0]
    assert set(warning) == {
        "id",
        "at",
        "kind",
        "account",
        "instance_id",
        "rule",
        "message",
        "mode",
        "usd_per_hour",
        "evidence",
        "data",
    }
    assert warning["at"] == "2026-03-01T12:00:00Z"
    assert warning["mode"] == "dry-run"
    assert warning["usd_per_hour"] == 0.52
    assert warning["evidence"] == {"idle_minutes": 20, "coverage": 0.9712}
    assert warning["data"]["status"] == "warn"
    assert events[3]["mode"] is None
    assert events[3]["rule"] is None


def test_since_takes_a_duration_or_an_iso_time_and_limit_keeps_the_most_recent(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)

    def kinds(*argv: str) -> list[str]:
        result = run(capsys, "events", "--db", str(db), "--json", *argv)
        assert result.code == 0, result.err
        return [json.loads(line)["kind"] for line in result.out.splitlines()]

    # NOW is T0 + 2h: one hour back reaches T0 + 1h.
    assert kinds("--since", "1h") == ["protection_added"]
    assert kinds("--since", "2026-03-01T12:30:00Z") == [
        "action_planned",
        "provider_called",
        "protection_added",
    ]
    assert kinds("--since", "2026-03-01T12:31:00") == ["provider_called", "protection_added"]
    assert kinds("--limit", "2") == ["provider_called", "protection_added"]
    assert len(kinds("--limit", "0")) == 4


def test_instance_takes_a_bare_id_and_shows_only_its_events(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)

    result = run(capsys, "events", "--db", str(db), "--instance", "102")

    assert result.code == 0
    assert len(result.out.splitlines()) == 2
    assert "protection_added" in result.out


def test_an_ambiguous_bare_id_is_exit_2_listing_the_matches(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)
    other = "vast-second"
    store.record_observation(observation(instance("101", account=other), account=other), NOW)

    result = run(capsys, "events", "--db", str(db), "--instance", "101")

    assert result.code == 2
    assert "ambiguous" in result.err
    assert "vast-main/101 (job-101)" in result.err
    assert "vast-second/101 (job-101)" in result.err
    assert run(capsys, "events", "--db", str(db), "--instance", "vast-second/101").code == 0


def test_an_unknown_instance_is_exit_2_listing_the_recorded_ones(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_history(store)

    result = run(capsys, "events", "--db", str(db), "--instance", "vast-main/999")

    assert result.code == 2
    assert "unknown instance 'vast-main/999'" in result.err
    assert "vast-main/101 (job-101)" in result.err
    assert "vast-main/102 (job-102)" in result.err


def test_a_since_that_is_neither_duration_nor_time_is_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "events", "--db", str(db), "--since", "yesterday")

    assert result.code == 2
    assert "--since: 'yesterday' is neither a duration" in result.err


def test_an_empty_history_says_so(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "events", "--db", str(db))

    assert (result.code, result.out) == (0, "no events recorded\n")
