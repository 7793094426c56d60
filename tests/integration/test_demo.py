"""``watchdog-gpu demo`` as a real subprocess: the real daemon against the loopback simulator
through the scripted night, its story, its summary and the database it leaves.

The night is played at 1440× (about 20 s) instead of the default 720×; the outcomes must be the
same. Assertions are about what happened (read from the database the demo leaves and from what
it printed), never about how long it took: the only bound is the subprocess timeout, a guard
against a hang.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import apprise
import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.sim.phone import Phone
from watchdog_gpu.store import ActionRow, AuditEvent, Store, create_engine_for, sqlite_url

pytestmark = pytest.mark.slow

# The demo's own default speed (what a newcomer runs). At twice that, a CPU-starved daemon in a
# busy test worker once let the night end before the poll after the runaway's verified destroy:
# 1 s of real time is 24 min of the night.
SPEED = "720"
HANG_GUARD_SECONDS = 240
TRAINING = ("lambda-research", "0920582c7ff041399e34823a0be62549")
FORGOTTEN = ("vast-main", "9001")
OUTBID = ("vast-main", "9002")
STOPPED_DISK = ("vast-main", "9003")
PROTECTED = ("runpod-lab", "k3f9x2m7q1w8za")
RUNAWAY = ("runpod-lab", "r8x8h100runaway")
LEAKING = {FORGOTTEN: "idle_gpu", OUTBID: "paused_interruptible", STOPPED_DISK: "stopped_disk"}
ROW = re.compile(r"^  (\S+/\S+) (\S+)\s+\$(\d+\.\d\d)\s+\$(\d+\.\d\d)\s+(.*)$")
TOTAL = re.compile(r"^  total\s+\$(\d+\.\d\d)\s+\$(\d+\.\d\d)\s+saved \$(\d+\.\d\d)$")


@dataclass(frozen=True)
class Night:
    code: int
    stdout: str
    stderr: str
    database: Path
    actions: list[ActionRow]
    audit: list[AuditEvent]

    def actions_of(self, instance: tuple[str, str]) -> list[ActionRow]:
        return [a for a in self.actions if (a.account, a.instance_id) == instance]

    def audit_of(self, instance: tuple[str, str], kind: str) -> list[AuditEvent]:
        return [e for e in self.audit if (e.account, e.instance_id) == instance and e.kind == kind]

    def summary_row(self, name: str) -> re.Match[str]:
        for line in self.stdout.splitlines():
            match = ROW.match(line)
            if match and match.group(2) == name:
                return match
        raise AssertionError(f"no summary row for {name}:\n{self.stdout}")


def child_environment(tmp_path: Path) -> dict[str, str]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WATCHDOG_GPU_")
        and name not in {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
    }
    environ["HOME"] = str(tmp_path / "home")
    return environ


def watchdog_gpu(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", *args],
        cwd=cwd,
        env=child_environment(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Night:
    directory = tmp_path_factory.mktemp("demo")
    database = directory / "night.db"
    done = watchdog_gpu(
        "demo", "--speed", SPEED, "--db", str(database), cwd=directory, timeout=HANG_GUARD_SECONDS
    )
    store = Store(create_engine_for(sqlite_url(database)))
    try:
        actions, audit = store.list_actions(), store.list_audit_events()
    finally:
        store.engine.dispose()
    return Night(done.returncode, done.stdout, done.stderr, database, actions, audit)


def test_the_demo_plays_the_whole_night_in_enforce_mode_and_exits_0(night: Night) -> None:
    assert night.code == 0, night.stderr
    assert "The demo runs in\nenforce mode against simulated accounts" in night.stdout
    assert "06:00  the night is over. What the watchdog did:" in night.stdout
    assert f"status --db {night.database}" in night.stdout
    assert "Traceback" not in night.stdout + night.stderr


def test_the_leaks_are_destroyed_by_their_rule_verified_and_warned_before(night: Night) -> None:
    for instance, rule in LEAKING.items():
        actions = night.actions_of(instance)
        assert [(a.rule, a.kind.value, a.status, a.dry_run) for a in actions] == [
            (rule, "destroy", ActionStatus.VERIFIED, False)
        ], instance
        warnings = night.audit_of(instance, "warning")
        assert warnings, f"{instance} was destroyed without a warning"
        assert warnings[0].at < actions[0].created_at
        assert night.audit_of(instance, "action_verified")


def test_the_budget_emergency_destroys_the_runaway_at_once_after_it_launched(
    night: Night,
) -> None:
    (action,) = night.actions_of(RUNAWAY)
    assert (action.rule, action.kind.value, action.status) == (
        "budget",
        "destroy",
        ActionStatus.VERIFIED,
    )
    # Launched at 04:00 (the night starts at 22:00): the ceiling is crossed after that.
    assert f"{action.created_at:%H}" == "04"
    assert not night.audit_of(RUNAWAY, "warning")  # an emergency skips the grace


def test_the_busy_training_run_is_never_touched(night: Night) -> None:
    assert night.actions_of(TRAINING) == []
    assert [e.kind for e in night.audit if (e.account, e.instance_id) == TRAINING] == []
    row = night.summary_row("train-llama-70b")
    assert row.group(5) == "never touched [running]"
    assert row.group(3) == row.group(4)


def test_the_protected_instance_is_reported_by_idle_gpu_and_budget_and_never_touched(
    night: Night,
) -> None:
    assert night.actions_of(PROTECTED) == []
    reported = {event.rule for event in night.audit_of(PROTECTED, "protected")}
    assert reported == {"idle_gpu", "budget"}
    assert night.summary_row("keep-eval-server").group(5) == (
        "protected: reported by budget, idle_gpu, never touched [running]"
    )
    phone = [line for line in night.stdout.splitlines() if "  phone     critical" in line]
    assert any('"keep-eval-server" budget: budget emergency' in line for line in phone)


def test_the_summary_shows_less_spent_with_the_watchdog_for_every_leak(night: Night) -> None:
    for name in ("forgotten-4090", "sweep-bid-3090", "h100-ckpt-disk", "h100x8-runaway"):
        row = night.summary_row(name)
        spent, without = float(row.group(3)), float(row.group(4))
        assert 0 < spent < without, name
        assert row.group(5).endswith(", verified [gone]")
    totals = [m for line in night.stdout.splitlines() if (m := TOTAL.match(line))]
    assert len(totals) == 1
    spent, without, saved = (float(totals[0].group(i)) for i in (1, 2, 3))
    assert spent < without
    assert saved == pytest.approx(without - spent, abs=0.011)


def test_the_story_tells_the_warning_then_the_destroy_as_the_phone_received_them(
    night: Night,
) -> None:
    lines = night.stdout.splitlines()
    warned = next(i for i, line in enumerate(lines) if "vast-main/9001 will be destroyed" in line)
    destroyed = next(
        i for i, line in enumerate(lines) if 'Destroyed vast-main/9001 "forgotten-4090"' in line
    )
    assert warned < destroyed
    assert lines[warned][5:].startswith("  phone     warning")
    assert re.search(r"^\d\d:\d\d  watchdog  destroy verified  vast-main/9001 ", night.stdout, re.M)
    assert re.search(r"^\d\d:\d\d  script    vast-main/9002 .*outbid", night.stdout, re.M)
    times = [line[:5] for line in lines if re.match(r"^\d\d:\d\d  ", line)]
    assert times[0] == "22:00"


def test_the_metrics_endpoint_counted_the_actions(night: Night) -> None:
    counted = [line for line in night.stdout.splitlines() if "watchdog_gpu_actions_total{" in line]
    assert any(
        'action="destroy",outcome="verified",rule="budget"} 1.0' in line for line in counted
    ), counted
    assert not [line for line in counted if line.endswith(" 0.0")]  # the zeros are left out


def test_status_and_events_read_the_database_the_demo_leaves(night: Night) -> None:
    status = watchdog_gpu(
        "status", "--db", str(night.database), "--json", cwd=night.database.parent
    )
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    instances = {(i["account"], i["instance_id"]): i for i in data["instances"]}
    assert set(instances) == {TRAINING, PROTECTED}  # the rest were destroyed
    assert instances[TRAINING]["gpu"]["status"] == "busy"
    assert instances[PROTECTED]["protected"]
    assert [p["value"] for p in data["protections"]] == ["*keep*"]

    events = watchdog_gpu("events", "--db", str(night.database), cwd=night.database.parent)
    assert events.returncode == 0, events.stderr
    assert "action_verified" in events.stdout
    assert "runpod-lab/r8x8h100runaway" in events.stdout


def test_report_reads_the_spend_and_the_destroys_from_the_database_the_demo_leaves(
    night: Night,
) -> None:
    done = watchdog_gpu("report", "--db", str(night.database), "--json", cwd=night.database.parent)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    destroys = {(a["account"], a["instance_id"]): a for a in report["actions"]}
    assert {key: a["rule"] for key, a in destroys.items()} == {**LEAKING, RUNAWAY: "budget"}
    for action in destroys.values():
        assert (action["kind"], action["status"]) == ("destroy", "verified")
        assert action["stopped_usd_per_hour"] > 0
        assert action["estimated_saving_usd"] > 0
    assert report["estimated_saving_usd"] == pytest.approx(
        sum(a["estimated_saving_usd"] for a in destroys.values()), abs=1e-3
    )
    # The ledger the watchdog recorded is what the simulated providers billed, to the cent: per
    # instance and in total, and the demo says so beside its own table.
    totals = [m for line in night.stdout.splitlines() if (m := TOTAL.match(line))]
    spent = totals[0].group(1)
    assert f"{report['total']['usd']:.2f}" == spent
    assert f"recorded ${spent} for the night; the providers billed ${spent}." in night.stdout
    by_instance = watchdog_gpu(
        "report",
        "--db",
        str(night.database),
        "--by",
        "instance",
        "--json",
        cwd=night.database.parent,
    )
    assert by_instance.returncode == 0, by_instance.stderr
    recorded = {
        (row["account"], row["id"]): f"{row['usd']:.2f}"
        for row in json.loads(by_instance.stdout)["rows"]
    }
    billed = {}
    for line in night.stdout.splitlines():
        match = ROW.match(line)
        if match:
            account, short = match.group(1).split("/")
            instance = next(
                i for a, i in recorded if a == account and i.startswith(short.rstrip("…"))
            )
            billed[(account, instance)] = match.group(3)
    assert recorded == billed
    text = watchdog_gpu(
        "report", "--db", str(night.database), "--by", "instance", cwd=night.database.parent
    )
    assert text.returncode == 0, text.stderr
    assert "budget" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 100
    for by in ("instance", "day", "rule"):
        table = watchdog_gpu(
            "report", "--db", str(night.database), "--by", by, "--csv", cwd=night.database.parent
        )
        assert table.returncode == 0, table.stderr
        assert len(table.stdout.splitlines()) > 1


def test_an_existing_database_is_never_overwritten_without_force(tmp_path: Path) -> None:
    database = tmp_path / "mine.db"
    database.write_bytes(b"precious")

    refused = watchdog_gpu("demo", "--db", str(database), cwd=tmp_path)

    assert refused.returncode == 2
    assert "--force" in refused.stderr
    assert database.read_bytes() == b"precious"


def test_ctrl_c_stops_the_demo_cleanly_with_the_night_so_far(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", "demo", "--db", str(tmp_path / "cut.db")],
        cwd=tmp_path,
        env=child_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    story: list[str] = []
    for line in process.stdout:  # wait until the night has begun
        story.append(line)
        if line.startswith("22:00  script"):
            break
    process.send_signal(signal.SIGINT)
    rest, errors = process.communicate(timeout=HANG_GUARD_SECONDS)
    story.append(rest)

    assert process.returncode == 130, errors
    assert "the demo was interrupted. What the watchdog did:" in "".join(story)
    assert "Traceback" not in errors


def test_the_phone_records_what_apprise_delivers_with_the_clock_time() -> None:
    clock = VirtualClock(datetime(2026, 3, 2, 23, 20, tzinfo=UTC))
    phone = Phone(clock).start()
    try:
        sender = apprise.Apprise()
        assert sender.add(phone.url)
        delivered = sender.notify(
            title="vast-main/9001 will be destroyed in 10 min",
            body="idle_gpu",
            notify_type=apprise.NotifyType.FAILURE,
        )
    finally:
        phone.stop()

    assert delivered
    (message,) = phone.messages()
    assert message.title == "vast-main/9001 will be destroyed in 10 min"
    assert message.body == "idle_gpu"
    assert message.severity == "critical"
    assert message.received_at == clock.now()


def test_the_phone_ignores_what_is_not_an_apprise_message() -> None:
    phone = Phone(VirtualClock(datetime(2026, 3, 2, 22, 0, tzinfo=UTC)))
    assert phone.receive(b"not json") is None
    assert phone.receive(b'{"message": "no title"}') is None
    assert phone.messages() == []
    phone.stop()


def test_the_closing_hint_works_as_pasted(night: Night, tmp_path: Path) -> None:
    hints = night.stdout.split("The database stays for you to look at:\n", 1)[1].splitlines()
    commands = [line.strip() for line in hints if line.startswith("  ")]
    assert [c.split()[c.split().index("--db") - 1] for c in commands] == [
        "status",
        "events",
        "report",
    ]
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,  # anywhere: the hint does not depend on the demo's directory
            env=child_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "vast-main" in done.stdout


def test_no_probe_noise_about_instances_being_destroyed(night: Night) -> None:
    # Once 9001's destroy is called, its SSH goes away before the listing says so: the probe
    # leaves it alone instead of warning that it is unreachable.
    lines = night.stdout.splitlines()
    called = next(i for i, line in enumerate(lines) if "destroy called    vast-main/9001" in line)
    assert not [line for line in lines[called:] if "probe instance=vast-main/9001" in line]
