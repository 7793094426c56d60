"""``watchdog-gpu status`` fits the terminal: at 80, 120 and 250 columns every line fits and the
essential facts of each instance remain; a pipe gets whole lines unless ``$COLUMNS`` is set."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios
from datetime import timedelta
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
    probe,
    sample,
)
from tests.integration.test_cli_status import on_a_terminal
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.commands.common import output_width
from watchdog_gpu.fleet import ProtectionKind
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    Severity,
)
from watchdog_gpu.store import Store

LONG_NAME = "llama-70b-finetune-checkpoint-resume-from-step-41000"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    """Four instances with every column filled: 101 idle for an hour with a destroy pending and
    another due, 102 stopped and snoozed with a destroy due, 103 whose probe fails, 104
    protected."""
    for minute in range(0, 121, 2):
        at = T0 + minutes(minute)
        if minute % 10 == 0:
            instances = (
                instance("101", at=at, name=LONG_NAME),
                instance("102", InstanceState.STOPPED, at=at, name="keep-me"),
                instance("103", at=at),
                instance("104", at=at, name="notebook"),
            )
            store.record_observation(observation(*instances, at=at), at)
            store.record_probes([probe("104", at, sample("104", at, 0, 80.0))])
        busy = 50.0 if minute < 60 else 0.0
        store.record_probes([probe("101", at, sample("101", at, 0, busy), sample("101", at, 1, 0))])
    store.record_probe(
        ProbeOutcome(ACCOUNT, "103", NOW, ProbeStatus.UNREACHABLE, 10.0, detail="refused")
    )
    store.enqueue_action(planned_action("idle:101:stop", at=NOW, instance_id="101"))
    findings = [
        Finding(
            rule=rule,
            account=ACCOUNT,
            instance_id=instance_id,
            severity=Severity.WARNING,
            action=ActionKind.DESTROY,
            summary="due",
            episode_started_at=T0,
            due_at=NOW + minutes(30),
        )
        for rule, instance_id in (("idle_gpu", "101"), ("stopped_disk", "102"))
    ]
    store.record_findings(findings, NOW)
    store.add_snooze(ACCOUNT, "102", NOW + timedelta(hours=1), NOW, "checkpointing")
    store.add_protection(
        ProtectionKind.INSTANCE_ID, "104", NOW, account=ACCOUNT, reason="the team's notebook"
    )
    return tmp_path / "watchdog-gpu.db"


def instance_cells(output: str) -> dict[str, dict[str, str]]:
    """Each instance's cells by column header, read back from the table however its cells were
    wrapped: a row's first line names the instance, its continuation lines leave that blank."""
    lines = output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("INSTANCE "))
    header = lines[start]
    columns = [(m.group(), m.start()) for m in re.finditer(r"\S+", header)]
    spans = [
        (name, begin, columns[index + 1][1] if index + 1 < len(columns) else None)
        for index, (name, begin) in enumerate(columns)
    ]
    rows: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        if not line.startswith(" "):
            current = rows.setdefault(line.split()[0], {name: [] for name, _, _ in spans})
        for name, begin, end in spans:
            piece = line[begin:end].strip()
            if piece:
                current[name].append(piece)
    return {
        key: {name: " ".join(texts) for name, texts in row.items()} for key, row in rows.items()
    }


def status_at(
    columns: str | None,
    db: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    result = run(capsys, "status", "--db", str(db))
    assert result.code == 0, result.err
    return result.out


@pytest.mark.parametrize("columns", [80, 120, 250])
def test_every_line_fits_the_width_and_each_instance_keeps_its_essential_facts(
    columns: int, db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    output = status_at(str(columns), db, monkeypatch, capsys)

    assert max(len(line) for line in output.splitlines()) <= columns, output
    rows = instance_cells(output)
    assert list(rows) == [f"{ACCOUNT}/{number}" for number in ("101", "102", "103", "104")]
    # The next action: the PENDING column, or NEXT where snoozes and protections join it.
    action = "PENDING" if "PENDING" in rows[f"{ACCOUNT}/101"] else "NEXT"
    idle, stopped, unknown, protected = rows.values()
    assert (idle["STATE"], idle["$/H"], idle["GPU"]) == (
        "running since 12:00 UTC",
        "$0.52/h",
        "idle 1 h",
    )
    assert idle[action] == "destroy pending; destroy due 14:30 UTC (idle_gpu)"
    assert (stopped["STATE"], stopped["$/H"]) == ("stopped since 12:00 UTC", "$0.020/h")
    assert stopped[action].startswith("destroy due 15:00 UTC (stopped_disk)")
    assert unknown["GPU"] == "unknown: probe unreachable"
    assert protected["GPU"] == "busy"
    if action == "NEXT":
        assert stopped[action].endswith("; snoozed until 15:00 UTC")
        assert protected[action] == f"protected: instance {ACCOUNT}/104 is protected"
    else:
        assert stopped["SNOOZED"] == "until 15:00 UTC"
        assert protected["PROTECTED"] == f"instance {ACCOUNT}/104 is protected"


def test_a_wide_terminal_keeps_every_column_and_whole_names(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    output = status_at("250", db, monkeypatch, capsys)

    header = next(line for line in output.splitlines() if line.startswith("INSTANCE "))
    assert header.split() == [
        "INSTANCE",
        "NAME",
        "STATE",
        "$/H",
        "GPU",
        "PENDING",
        "SNOOZED",
        "PROTECTED",
    ]
    assert instance_cells(output)[f"{ACCOUNT}/101"]["NAME"] == LONG_NAME
    assert output == status_at(None, db, monkeypatch, capsys)  # a pipe: the same whole lines


def test_a_pipe_gets_whole_lines_unless_columns_is_set(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    piped = status_at(None, db, monkeypatch, capsys)
    narrowed = status_at("100", db, monkeypatch, capsys)

    assert max(len(line) for line in piped.splitlines()) > 200
    assert LONG_NAME in piped
    assert max(len(line) for line in narrowed.splitlines()) <= 100


def test_the_width_is_columns_else_the_terminals_else_none() -> None:
    main_fd, child_fd = pty.openpty()
    try:
        fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 97, 0, 0))
        with os.fdopen(os.dup(child_fd), "w") as terminal:
            assert output_width(terminal, {}) == 97
            assert output_width(terminal, {"COLUMNS": "132"}) == 132
            assert output_width(terminal, {"COLUMNS": "wide"}) == 97
    finally:
        os.close(child_fd)
        os.close(main_fd)
    with (Path(os.devnull)).open("w") as pipe_like:
        assert output_width(pipe_like, {}) is None
        assert output_width(pipe_like, {"COLUMNS": "80"}) == 80


def test_on_an_80_column_terminal_the_real_command_fits_it(store: Store, tmp_path: Path) -> None:
    # The command runs in its own process on a real pty 80 columns wide, on the real clock.
    now = SystemClock().now().replace(microsecond=0)
    store.record_observation(
        observation(instance("101", at=now, name=LONG_NAME), instance("102", at=now), at=now), now
    )
    store.record_probe(probe("101", now, sample("101", now, 0, 97.0)))
    environ = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    environ["HOME"] = str(tmp_path)

    shown = on_a_terminal(["status", "--db", str(tmp_path / "watchdog-gpu.db")], environ, 80)

    lines = re.sub(r"\x1b\[[0-9;]*m", "", shown).splitlines()
    assert max(len(line) for line in lines) <= 80, shown
    assert f"{ACCOUNT}/101" in shown
    assert "busy" in shown
