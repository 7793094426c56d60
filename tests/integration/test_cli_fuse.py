"""``watchdog-gpu fuse status`` and ``fuse reset`` against a real SQLite file."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import NOW, freeze_clock, isolate, run, write_config
from tests.integration.store_builders import (
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    planned_notification,
)
from watchdog_gpu.fuse_count import acted_in_last_hour
from watchdog_gpu.model import ActionStatus, Severity
from watchdog_gpu.store import Store

TRIP_REASON = "5 actions due this tick; limits: 3 per tick, 10 more this hour, 2 of 4"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    store.record_observation(observation(instance("101"), instance("102")), T0)
    return tmp_path / "watchdog-gpu.db"


def trip(store: Store) -> None:
    """What the tick records when the planner trips the fuse: held actions, the latch."""
    at = T0 + minutes(90)
    for instance_id in ("101", "102"):
        store.enqueue_action(
            planned_action(f"idle:{instance_id}:destroy", at=at, instance_id=instance_id),
            ActionStatus.BLOCKED,
        )
    note = planned_notification("fuse:trip", at=at, severity=Severity.CRITICAL)
    store.record_fuse_trip(at, TRIP_REASON, note)


def test_status_of_a_fuse_that_never_tripped_says_ok_with_the_limits(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "fuse", "status", "--db", str(db))

    assert result.code == 0
    assert result.out.splitlines()[0] == "fuse: ok (not tripped)"
    assert "limits: 3 per tick, 10 per hour, 50% of the billing fleet" in result.out
    assert "(defaults)" in result.out


def test_status_of_a_tripped_fuse_shows_why_and_the_held_actions(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trip(store)

    result = run(capsys, "fuse", "status", "--db", str(db))

    lines = result.out.splitlines()
    assert result.code == 0
    assert lines[0] == "fuse: TRIPPED at 2026-03-01 13:30:00 UTC"
    assert lines[1] == f"  why: {TRIP_REASON}"
    assert "held actions (2):" in lines
    held = [line for line in lines if "idle_gpu" in line]
    assert [line.split()[4] for line in held] == ["vast-main/101", "vast-main/102"]


def test_reset_releases_the_latch_cancels_held_actions_and_is_audited(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trip(store)
    assert "fuse: TRIPPED" in run(capsys, "status", "--db", str(db)).out

    result = run(capsys, "fuse", "reset", "--db", str(db))

    assert result.code == 0
    assert result.out.startswith("fuse reset; 2 held actions cancelled.")
    assert not store.fuse_latched()
    assert store.list_actions(statuses=[ActionStatus.BLOCKED]) == []
    assert len(store.list_actions(statuses=[ActionStatus.CANCELLED])) == 2
    reset = store.list_audit_events()[-1]
    assert (reset.kind, reset.at) == ("fuse_reset", NOW)
    assert reset.message.startswith("fuse reset by cli:")
    assert run(capsys, "fuse", "status", "--db", str(db)).out.startswith("fuse: ok")


def test_reset_of_a_fuse_that_is_not_tripped_changes_nothing(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "fuse", "reset", "--db", str(db))

    assert (result.code, result.out) == (0, "the fuse is not tripped: nothing to reset\n")
    assert store.list_audit_events() == []


def test_status_shows_the_configured_limits(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, db, "[safety]\nmax_actions_per_tick = 1\n")

    result = run(capsys, "fuse", "status", "--config", str(config))

    assert "limits: 1 per tick," in result.out
    assert "(defaults)" not in result.out


def test_fuse_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "fuse")

    assert exit_info.value.code == 2


def test_status_json_of_a_tripped_fuse(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trip(store)

    result = run(capsys, "fuse", "status", "--db", str(db), "--json")

    report = json.loads(result.out)
    assert result.code == 0
    assert report["tripped"] is True
    assert report["tripped_at"] == "2026-03-01T13:30:00Z"
    assert report["why"] == TRIP_REASON
    assert report["limits"]["per_tick"] == 3
    assert report["limits"]["from_config"] is False
    assert [held["instance"] for held in report["held_actions"]] == [
        "vast-main/101",
        "vast-main/102",
    ]


def test_status_json_of_a_fuse_that_never_tripped(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(run(capsys, "fuse", "status", "--db", str(db), "--json").out)

    assert (report["tripped"], report["tripped_at"], report["held_actions"]) == (False, None, [])


def test_status_counts_the_last_hour_as_the_fuse_does_leaving_dry_runs_out(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = NOW - minutes(10)
    store.enqueue_action(planned_action("real:destroy", at=at), ActionStatus.VERIFIED)
    for instance_id in ("101", "102"):
        dry = planned_action(f"dry:{instance_id}", at=at, instance_id=instance_id, dry_run=True)
        store.enqueue_action(dry, ActionStatus.DRY_RUN)
    view = store.load_fleet_view(NOW, timedelta(hours=1), NOW - timedelta(hours=1))
    fuse_count = acted_in_last_hour(view.recent_actions, NOW)

    text = run(capsys, "fuse", "status", "--db", str(db)).out
    shown = json.loads(run(capsys, "fuse", "status", "--db", str(db), "--json").out)

    assert fuse_count == 1
    assert f"destructive actions in the last hour (as the fuse counts them): {fuse_count}" in (
        text.splitlines()
    )
    assert shown["destructive_actions_last_hour"] == fuse_count
