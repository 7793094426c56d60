"""The command line starts fast: ``--help`` and each command import only what they run.

Checked in a fresh interpreter (a subprocess), since this test process has long imported
everything; the speed itself is measured in ``bench/`` (see bench/README.md), not asserted here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.interpreter import run_fresh
from watchdog_gpu.cli import COMMANDS, build_parser, doc_paragraph
from watchdog_gpu.commands.common import program_command
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head

HEAVY = ("sqlalchemy", "alembic", "apprise", "paramiko", "httpx", "rich", "pydantic")


def imported_after(argv: list[str]) -> set[str]:
    """The top-level packages imported by ``watchdog-gpu ARGV`` in a fresh interpreter (a None
    entry in ``sys.modules`` blocks an import: not loaded)."""
    script = (
        "import json, sys\n"
        "from watchdog_gpu.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = {m.split('.')[0] for m, module in sys.modules.items() if module is not None}\n"
        "sys.stderr.write(json.dumps(sorted(loaded)))\n"
    )
    done = run_fresh(script)
    names: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return set(names)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], []])
def test_top_level_help_imports_no_heavy_library(argv: list[str]) -> None:
    assert not imported_after(argv) & set(HEAVY)


def test_dmon_help_imports_neither_the_database_nor_the_network() -> None:
    loaded = imported_after(["dmon", "parse", "--help"])
    assert not loaded & {"sqlalchemy", "alembic", "apprise", "paramiko", "httpx"}


def test_status_of_a_missing_file_imports_nothing_heavy() -> None:
    # The missing file is reported before any database library is needed.
    loaded = imported_after(["status", "--db", "/nonexistent/watchdog-gpu.db"])
    assert not loaded & set(HEAVY)


@pytest.mark.parametrize("command", ["status", "events"])
def test_status_on_a_sqlite_file_at_head_imports_only_the_store(
    command: str, tmp_path: Path
) -> None:
    # The one Store reads it (SQLAlchemy), --db reads no configuration and the rules' defaults
    # are plain values (commands/status_defaults.py): neither Alembic (the database is at head)
    # nor pydantic nor the providers' or notifications' libraries.
    database = tmp_path / "wd.db"
    engine = create_engine_for(sqlite_url(database))
    upgrade_to_head(engine)
    engine.dispose()
    loaded = imported_after([command, "--db", str(database)])
    assert "sqlalchemy" in loaded
    assert not loaded & (set(HEAVY) - {"sqlalchemy"})
    assert "pydantic_settings" not in loaded


def test_status_on_a_sqlite_file_behind_head_migrates_it_through_the_store(
    tmp_path: Path,
) -> None:
    # A file never migrated is the Store's to migrate first (as before): SQLAlchemy and Alembic.
    database = tmp_path / "empty.db"
    database.touch()
    loaded = imported_after(["status", "--db", str(database)])
    assert {"sqlalchemy", "alembic"} <= loaded


def test_the_daemon_loads_no_migration_notification_or_terminal_library() -> None:
    # Alembic only when the database is not at head, Apprise only with notification routes,
    # never httpx's command-line client (click, rich, pygments): resident memory of a daemon
    # that runs for months (bench/README.md, "The daemon's memory floor").
    script = (
        "import json, sys\n"
        "import watchdog_gpu.commands.run, watchdog_gpu.daemon\n"
        "loaded = {m.split('.')[0] for m, module in sys.modules.items() if module is not None}\n"
        "print(json.dumps(sorted(loaded)))\n"
    )
    done = run_fresh(script)
    loaded = set(json.loads(done.stdout))
    assert {"sqlalchemy", "httpx", "apscheduler"} <= loaded
    assert not loaded & {"alembic", "apprise", "rich", "click", "pygments"}


def commands_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers


def test_every_command_in_the_table_is_registered_by_its_module() -> None:
    subparsers = commands_of(build_parser(everything=True))
    assert set(subparsers.choices) == set(COMMANDS)
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert helps == {name: text for name, (_, text) in COMMANDS.items()}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_placeholder_and_the_real_parser_list_the_same_summary(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lazy = build_parser(command, everything=False).format_help()
    full = build_parser(everything=True).format_help()
    assert lazy == full


def test_help_text_shows_no_rst_markup() -> None:
    parser = build_parser(everything=True)
    texts = [parser.format_help()]
    for sub in commands_of(parser).choices.values():
        texts.append(sub.format_help())
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                texts.extend(p.format_help() for p in action.choices.values())
    assert not [text for text in texts if "``" in text]


def test_doc_paragraph_turns_rst_literals_into_single_backticks() -> None:
    doc = "title\n\nRun ``watchdog-gpu run`` then\n``status``.\n\nmore"
    assert doc_paragraph(doc) == "Run `watchdog-gpu run` then\n`status`."
    assert doc_paragraph(doc, 5) is None
    assert doc_paragraph(None) is None


def test_unprotect_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    subparsers = commands_of(build_parser(everything=True))
    protect = subparsers.choices["protect"].format_help()
    unprotect = subparsers.choices["unprotect"].format_help()
    assert "Removes a protection" in unprotect
    assert "No rule stops or destroys a protected instance" in protect
    assert "No rule stops or destroys" not in unprotect


def test_the_command_to_run_again_works_as_pasted(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    program = venv_bin / "watchdog-gpu"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # Not on $PATH (bash scripts/demo runs .venv/bin/watchdog-gpu): the absolute path.
    assert program_command(str(program), path=str(elsewhere)) == str(program)
    # On $PATH: the bare name.
    assert program_command(str(program), path=str(venv_bin)) == "watchdog-gpu"
    # python -m watchdog_gpu
    assert program_command("/x/watchdog_gpu/__main__.py").endswith(" -m watchdog_gpu")
