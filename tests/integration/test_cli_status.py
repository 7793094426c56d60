"""``watchdog-gpu status``: accounts and instances from a real SQLite file, as a table or JSON."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import NOW, freeze_clock, isolate, run, write_config
from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    probe,
    sample,
)
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import (
    ActionKind,
    ActionStatus,
    Finding,
    InstanceState,
    PlannedAction,
    PlannedNotification,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Severity,
)
from watchdog_gpu.notices import ActionKey
from watchdog_gpu.notify.render import format_duration
from watchdog_gpu.store import Store


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    """The path of the ``store`` fixture's migrated SQLite file."""
    return tmp_path / "watchdog-gpu.db"


def record_two_hours(store: Store) -> None:
    """101 busy for an hour, then idle; 102 stopped, named keep-me; 103 running, GPU unknown.
    Polled and probed every 10 minutes from T0 to NOW; 101's two GPUs every 2 minutes once idle
    (what the idle rule's clock needs to observe idle time: samples at most 3 minutes apart)."""
    for minute in range(0, 121, 2):
        at = T0 + minutes(minute)
        if minute % 10 == 0:
            instances = (
                instance("101", at=at),
                instance("102", InstanceState.STOPPED, at=at, name="keep-me"),
                instance("103", at=at),
            )
            store.record_observation(observation(*instances, at=at), at)
            store.record_probes([probe("103", at, sample("103", at, 0, None))])
        if minute >= 60 or minute % 10 == 0:
            busy = 50.0 if minute < 60 else 0.0
            store.record_probes(
                [probe("101", at, sample("101", at, 0, busy), sample("101", at, 1, busy))]
            )


def line_of(output: str, start: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(start)]
    assert len(lines) == 1, output
    return lines[0]


def failed_probe(instance_id: str, at: datetime, status: ProbeStatus) -> ProbeOutcome:
    """A probe of ``instance_id`` at ``at`` that ended in ``status`` (no samples)."""
    return ProbeOutcome(
        account=ACCOUNT,
        instance_id=instance_id,
        at=at,
        status=status,
        duration_seconds=10.0,
        detail=f"probe {status.value}",
    )


def test_a_new_database_prints_no_accounts_recorded_yet_and_exits_0(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "status", "--db", str(db))

    assert result.code == 0
    assert result.out.startswith("no accounts recorded yet")
    as_json = json.loads(run(capsys, "status", "--db", str(db), "--json").out)
    assert as_json["accounts"] == []
    assert as_json["instances"] == []


def test_a_missing_database_file_is_exit_2_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo" / "watchdog.db"

    result = run(capsys, "status", "--db", str(missing))

    assert result.code == 2
    assert f"{missing} does not exist" in result.err
    assert not missing.exists()
    assert not missing.parent.exists()


def test_the_accounts_table_shows_balance_spend_runway_and_the_last_poll(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)

    result = run(capsys, "status", "--db", str(db))

    assert result.code == 0
    assert line_of(result.out, "ACCOUNT").split() == [
        "ACCOUNT",
        "PROVIDER",
        "BALANCE",
        "SPEND",
        "RUNWAY",
        "LAST",
        "POLL",
    ]
    # $25 at the provider's $1.04/h lasts 24 h 2 min.
    assert line_of(result.out, "vast-main ").split() == [
        "vast-main",
        "vast",
        "$25.00",
        "$1.04/h",
        "1",
        "d",
        "ok",
        "just",
        "now",
    ]
    assert "fuse: ok" in result.out


def test_gpu_activity_reads_idle_since_the_last_busy_sample_busy_and_unknown_never_idle(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)

    result = run(capsys, "status", "--db", str(db))

    idle = line_of(result.out, "vast-main/101")
    assert "running since 12:00 UTC" in idle
    assert "$0.52/h" in idle
    assert "idle 1 h" in idle  # last busy sample at 12:50, idle from 13:00 to 14:00
    assert "unknown" in line_of(result.out, "vast-main/103")
    assert "idle" not in line_of(result.out, "vast-main/103")
    stopped = line_of(result.out, "vast-main/102")
    assert "stopped since 12:00 UTC" in stopped
    assert "$0.020/h" in stopped  # a stopped instance bills its disk


def test_a_busy_gpu_reads_busy(store: Store, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store.record_observation(observation(instance("101", at=NOW), at=NOW), NOW)
    store.record_probe(probe("101", NOW, sample("101", NOW, 0, 0.0), sample("101", NOW, 1, 80.0)))

    result = run(capsys, "status", "--db", str(db))

    assert line_of(result.out, "vast-main/101").split()[7] == "busy"


def test_pending_actions_snoozes_and_due_actions_appear_on_the_instance_row(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    store.enqueue_action(planned_action("idle:101:destroy", at=NOW, instance_id="101"))
    store.add_snooze(ACCOUNT, "102", NOW + timedelta(hours=1), NOW, "checkpointing")
    stopped_finding = Finding(
        rule="stopped_disk",
        account=ACCOUNT,
        instance_id="102",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="stopped for 2 h",
        episode_started_at=T0,
        due_at=NOW + minutes(30),
    )
    store.record_findings([stopped_finding], NOW)
    result = run(capsys, "status", "--db", str(db))
    # No warning went out yet: the destroy is a full warn_before (1 h) after the next one.
    assert "destroy due 15:00 UTC (stopped_disk)" in line_of(result.out, "vast-main/102")
    store.enqueue_notification(
        PlannedNotification(
            idempotency_key=f"{stopped_finding.episode_key}:warning",
            severity=Severity.WARNING,
            title="vast-main/102 will be destroyed",
            body="",
            created_at=NOW - minutes(30),
        )
    )

    result = run(capsys, "status", "--db", str(db))

    assert "destroy pending" in line_of(result.out, "vast-main/101")
    stopped = line_of(result.out, "vast-main/102")
    assert "destroy due 14:30 UTC (stopped_disk)" in stopped
    assert "until 15:00 UTC" in stopped


def test_a_finding_not_seen_since_the_last_poll_is_no_longer_shown_as_due(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    cleared = Finding(
        rule="stopped_disk",
        account=ACCOUNT,
        instance_id="102",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="stopped",
        episode_started_at=T0,
        due_at=NOW + minutes(30),
    )
    store.record_findings([cleared], T0 + minutes(30))  # evaluations since did not see it

    result = run(capsys, "status", "--db", str(db))

    assert "due" not in line_of(result.out, "vast-main/102")


def test_a_monitor_mode_destroy_whose_dry_run_is_recorded_is_not_listed_as_due(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    stopped = Finding(
        rule="stopped_disk",
        account=ACCOUNT,
        instance_id="102",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="stopped for 2 h",
        episode_started_at=T0,
        due_at=NOW - minutes(10),
    )
    store.record_findings([stopped], NOW)
    store.enqueue_notification(
        PlannedNotification(
            idempotency_key=f"{stopped.episode_key}:warning",
            severity=Severity.WARNING,
            title="vast-main/102 will be destroyed",
            body="",
            created_at=NOW - minutes(90),
        )
    )
    dry_run = PlannedAction(
        idempotency_key=ActionKey(stopped.episode_key, ActionKind.DESTROY, dry_run=True).format(),
        account=ACCOUNT,
        instance_id="102",
        rule="stopped_disk",
        kind=ActionKind.DESTROY,
        dry_run=True,
        reason="stopped for 2 h",
        planned_at=NOW - minutes(5),
        episode_key=stopped.episode_key,
    )
    store.enqueue_action(dry_run, ActionStatus.DRY_RUN)
    enforce = write_config(tmp_path, db, mode="enforce")
    (tmp_path / "monitor").mkdir()
    monitor = write_config(tmp_path / "monitor", db, mode="monitor")

    db_row = line_of(run(capsys, "status", "--db", str(db)).out, "vast-main/102")
    monitor_row = line_of(run(capsys, "status", "--config", str(monitor)).out, "vast-main/102")
    shown = json.loads(run(capsys, "status", "--db", str(db), "--json").out)
    enforce_row = line_of(run(capsys, "status", "--config", str(enforce)).out, "vast-main/102")

    # The mode unknown (--db alone) or monitor: the recorded dry run shows the action was done.
    assert "due" not in db_row
    assert "due" not in monitor_row
    assert [i["due"] for i in shown["instances"] if i["instance_id"] == "102"] == [[]]
    # Switched to enforce mid-episode, the recorded dry run does not stand in for the destroy.
    assert "destroy due 13:50 UTC (stopped_disk)" in enforce_row


def test_protections_from_the_database_and_from_the_configuration_are_shown(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    config = write_config(tmp_path, db, '[safety]\nprotect_names = ["*keep*"]\n')
    assert run(capsys, "protect", "vast-main/101", "--db", str(db)).code == 0

    with_config = run(capsys, "status", "--config", str(config))
    db_only = run(capsys, "status", "--db", str(db))

    assert "name matches protected pattern '*keep*'" in line_of(with_config.out, "vast-main/102")
    assert line_of(db_only.out, "vast-main/102").endswith("-")
    for output in (with_config.out, db_only.out):
        assert "instance vast-main/101 is protected" in line_of(output, "vast-main/101")
        assert "  id 101 in account vast-main" in output


def test_a_failed_poll_shows_the_error_kind(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    store.record_poll_failure(ACCOUNT, "vast", "auth", "401 Unauthorized", NOW)

    table = run(capsys, "status", "--db", str(db)).out
    account = json.loads(run(capsys, "status", "--db", str(db), "--json").out)["accounts"][0]

    assert line_of(table, "vast-main ").endswith("ERROR auth just now")
    assert account["last_poll"] == "error"
    assert account["last_poll_error_kind"] == "auth"
    assert account["last_poll_error_message"] == "401 Unauthorized"


def test_the_json_object_has_the_documented_keys_and_values(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    store.enqueue_action(planned_action("idle:101:destroy", at=NOW, instance_id="101"))

    result = run(capsys, "status", "--db", str(db), "--json")

    status = json.loads(result.out)
    assert set(status) == {
        "as_of",
        "clock_note",
        "database",
        "mode",
        "fuse",
        "leader",
        "accounts",
        "instances",
        "protections",
    }
    assert status["as_of"] == "2026-03-01T14:00:00Z"
    assert status["fuse"] == {"latched": False, "held_actions": 0}
    assert status["leader"] is None  # SQLite: one daemon, no election
    [account] = status["accounts"]
    assert account["name"] == "vast-main"
    assert account["balance_usd"] == 25.0
    assert account["spend_usd_per_hour"] == 1.04
    assert account["spend_rate_source"] == "provider"
    assert account["runway_hours"] == pytest.approx(25 / 1.04)
    assert account["last_poll_ok_at"] == "2026-03-01T14:00:00Z"
    instances = {item["instance_id"]: item for item in status["instances"]}
    idle = instances["101"]
    assert set(idle) == {
        "account",
        "instance_id",
        "name",
        "provider",
        "state",
        "raw_state",
        "state_since",
        "usd_per_hour",
        "gpu",
        "pending_actions",
        "due",
        "snoozed_until",
        "protected",
    }
    assert idle["state"] == "running"
    assert idle["usd_per_hour"] == pytest.approx(0.52)
    assert idle["gpu"]["status"] == "idle"
    assert idle["gpu"]["idle_since"] == "2026-03-01T13:00:00Z"
    assert idle["gpu"]["idle_seconds"] == 3600
    assert idle["gpu"]["last_busy_at"] == "2026-03-01T12:50:00Z"
    assert idle["pending_actions"] == [
        {
            "kind": "destroy",
            "rule": "idle_gpu",
            "status": "pending",
            "dry_run": False,
            "created_at": "2026-03-01T14:00:00Z",
        }
    ]
    assert instances["103"]["gpu"]["status"] == "unknown"
    assert instances["102"]["gpu"]["status"] == "not_running"


def test_a_database_ahead_of_this_clock_is_shown_as_of_its_latest_record(
    store: Store, db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    freeze_clock(monkeypatch, T0 + minutes(30))  # an accelerated demo ran ahead of real time

    result = run(capsys, "status", "--db", str(db))

    assert "as of 2026-03-01 14:00:00 UTC" in result.out
    assert "note: the database holds records up to 2026-03-01 14:00:00 UTC" in result.out
    assert line_of(result.out, "vast-main ").endswith("ok just now")


def test_without_flags_the_configuration_in_the_current_directory_names_the_database(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_two_hours(store)
    write_config(tmp_path, db)  # ./watchdog-gpu.toml (the test runs in tmp_path)

    result = run(capsys, "status")

    assert result.code == 0
    assert f"database sqlite:///{db}" in result.out


def test_without_any_configuration_the_default_database_must_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "status")

    assert result.code == 2
    default = tmp_path / "home" / ".local" / "state" / "watchdog-gpu" / "watchdog-gpu.db"
    assert f"{default} does not exist" in result.err
    assert not default.parent.exists()


def test_an_invalid_configuration_is_exit_2_with_its_problems(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, db, "[safety]\nmax_snooze = 5\n")

    result = run(capsys, "status", "--config", str(config))

    assert result.code == 2
    assert "invalid configuration (1 problem):" in result.err
    assert "safety.max_snooze" in result.err


def test_a_gpu_idle_in_every_sample_reads_at_least_and_a_failed_probe_is_named(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for minute in range(0, 119, 2):
        at = T0 + minutes(minute)
        if minute % 10 == 0:
            store.record_observation(observation(instance("101", at=at), at=at), at)
        store.record_probe(probe("101", at, sample("101", at, 0, 0.0), sample("101", at, 1, 0.0)))
    failed = failed_probe("101", NOW, ProbeStatus.UNREACHABLE)
    store.record_observation(observation(instance("101", at=NOW), at=NOW), NOW)
    store.record_probe(failed)

    result = run(capsys, "status", "--db", str(db))

    # Every sample in the window is idle and no activity was seen: the idle rule's clock runs
    # from arming (arm_after, 20 minutes after the run started), and the GPUs may have been idle
    # longer. The newest sample (13:58) is fresh: the clock still runs.
    shown = format_duration(NOW - (T0 + minutes(20)))
    # The latest probe failed: now is unknown; the idle run is only what was last seen.
    assert f"unknown: probe unreachable (last seen idle ≥ {shown})" in line_of(
        result.out, "vast-main/101"
    )


def test_a_busy_gpu_whose_probe_then_fails_is_unknown_never_busy(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for minute in range(0, 111, 10):
        at = T0 + minutes(minute)
        store.record_observation(observation(instance("101", at=at), at=at), at)
        store.record_probe(probe("101", at, sample("101", at, 0, 97.0)))
    store.record_observation(observation(instance("101", at=NOW), at=NOW), NOW)
    store.record_probe(failed_probe("101", NOW, ProbeStatus.TIMEOUT))

    text = run(capsys, "status", "--db", str(db))
    as_json = json.loads(run(capsys, "status", "--db", str(db), "--json").out)

    line = line_of(text.out, "vast-main/101")
    assert "unknown: probe timeout (last seen busy)" in line
    assert "\x1b[" not in text.out  # not a terminal: no colour
    [gpu] = [item["gpu"] for item in as_json["instances"]]
    assert gpu["status"] == "unknown"
    assert gpu["last_probe_status"] == "timeout"
    assert gpu["last_seen"] == "busy"


def on_a_terminal(argv: list[str], environ: dict[str, str], columns: int | None = None) -> str:
    """What ``watchdog-gpu ARGV`` writes to a pseudo-terminal (a real pty, a real process;
    ``columns`` wide when given)."""
    main_fd, child_fd = pty.openpty()
    try:
        if columns is not None:
            fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        done = subprocess.run(
            [sys.executable, "-m", "watchdog_gpu", *argv],
            stdin=subprocess.DEVNULL,
            stdout=child_fd,
            stderr=subprocess.PIPE,
            env=environ,
            timeout=60,
            check=False,
        )
        os.close(child_fd)
        child_fd = -1
        chunks = []
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if child_fd >= 0:
            os.close(child_fd)
        os.close(main_fd)
    assert done.returncode == 0, done.stderr
    return b"".join(chunks).decode()


def test_the_gpu_state_is_coloured_on_a_terminal_unless_no_color(
    store: Store, db: Path, tmp_path: Path
) -> None:
    # The command runs in its own process, on the real clock.
    now = SystemClock().now().replace(microsecond=0)
    store.record_observation(
        observation(instance("101", at=now), instance("102", at=now), at=now), now
    )
    store.record_probe(probe("101", now, sample("101", now, 0, 97.0)))
    store.record_probe(failed_probe("102", now, ProbeStatus.UNREACHABLE))
    environ = {key: value for key, value in os.environ.items() if key not in {"NO_COLOR", "TERM"}}
    environ["HOME"] = str(tmp_path)

    coloured = on_a_terminal(["status", "--db", str(db)], {**environ, "TERM": "xterm"})
    plain = on_a_terminal(["status", "--db", str(db)], {**environ, "NO_COLOR": "1"})

    assert "\x1b[32mbusy\x1b[0m" in coloured
    assert "\x1b[31munknown: probe unreachable\x1b[0m" in coloured
    assert "\x1b[" not in plain
    assert "unknown: probe unreachable" in plain


def test_status_and_config_check_say_what_each_accounts_gpu_evidence_proves(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One function decides it (Settings.evidence, what the rules act by); both print it.
    record_two_hours(store)
    account = '[[accounts]]\nname = "vast-main"\nprovider = "vast"\napi_key = "k"\n'
    config = write_config(tmp_path, db, account)

    status = json.loads(run(capsys, "status", "--config", str(config), "--json").out)
    text = run(capsys, "status", "--config", str(config)).out
    check = json.loads(run(capsys, "config", "check", "--config", str(config), "--json").out)

    said = "no SSH probe and no utilisation from the API: its instances stay unobserved"
    (listed,) = status["accounts"]
    assert listed["gpu_evidence"].startswith(said)
    assert [a["gpu_evidence"] for a in check["accounts"]] == [listed["gpu_evidence"]]
    assert f"  vast-main GPU evidence: {listed['gpu_evidence']}" in text.splitlines()
    without_config = json.loads(run(capsys, "status", "--db", str(db), "--json").out)
    assert without_config["accounts"][0]["gpu_evidence"] is None


def test_the_gpu_clock_counts_provider_readings_only_where_the_account_opts_in(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The idle clock as the idle rule runs it (FleetView.evidence_of): RunPod's 0 % readings
    # prove idle only for an account with idle_evidence = "provider_api".
    pod = "pod-main"
    for minute in range(0, 121, 2):
        at = T0 + minutes(minute)
        listed = observation(
            replace(instance("201", at=at, account=pod), provider="runpod"), at=at, account=pod
        )
        store.record_observation(
            replace(listed, account=replace(listed.account, provider="runpod")), at
        )
        store.record_samples(
            replace(sample("201", at, gpu), account=pod, source=SampleSource.PROVIDER_API)
            for gpu in (0, 1)
        )
    account = '[[accounts]]\nname = "pod-main"\nprovider = "runpod"\napi_key = "k"\n'
    opted_in = account + 'idle_evidence = "provider_api"\n'

    def gpu(body: str) -> dict[str, object]:
        config = write_config(tmp_path, db, body)
        (shown,) = json.loads(run(capsys, "status", "--config", str(config), "--json").out)[
            "instances"
        ]
        return dict(shown["gpu"])

    assert gpu(account)["idle_since"] is None
    shown = gpu(opted_in)
    assert shown["idle_since"] is not None, shown
