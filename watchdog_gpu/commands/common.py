"""What the operator commands share: which database, the ID argument, tables and JSON output.

``--config`` or ``--db`` picks the database, which must exist (never created), read through the
daemon's own ``Store`` (:func:`opened_reader`). The rules:
``docs/commands.md``, "Which database the operator commands read".
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_USAGE
from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.errors import ConfigError, DatabaseInUseError, SchemaTooNewError, StoreError
from watchdog_gpu.model import InstanceState

# Only what they name: the durations parser (pydantic), the safety model (pydantic) and the
# store (SQLAlchemy) are imported where they are used, so `status --db` loads none of them.
if TYPE_CHECKING:
    from watchdog_gpu.config import Settings
    from watchdog_gpu.safety import SafetyConfig
    from watchdog_gpu.store import InstanceRecord, Store

# The commands read "now" here once per run; tests replace it with a VirtualClock.
clock: Clock = SystemClock()

# How many known ids an "unknown instance" error lists before it says "... and N more".
LISTED_IDS = 20


class CommandError(Exception):
    """A problem the command reports on stderr and turns into ``code`` (no traceback)."""

    def __init__(self, message: str, *, code: int = EXIT_USAGE, details: Sequence[str] = ()):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = tuple(details)


def current_time() -> datetime:
    """``now`` for this command run (aware UTC)."""
    return clock.now()


def reports_errors(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Wrap a command handler: CommandError → its message and code; a database written by a
    newer watchdog-gpu or locked by a daemon → exit 2; any other StoreError → exit 1."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except CommandError as error:
            print(error.message, file=sys.stderr)
            for line in error.details:
                print(f"  {line}", file=sys.stderr)
            return error.code
        except (SchemaTooNewError, DatabaseInUseError) as error:
            print(str(error), file=sys.stderr)
            return EXIT_USAGE
        except StoreError as error:
            print(f"database: {error}", file=sys.stderr)
            return EXIT_FAILURE

    wrapped.__doc__ = handler.__doc__
    return wrapped


# -- which database ---------------------------------------------------------------------------


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config PATH`` | ``--db PATH`` (mutually exclusive)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--config", type=Path, metavar="PATH", help="configuration file (its database and limits)"
    )
    source.add_argument(
        "--db",
        metavar="PATH",
        help="SQLite database file (or SQLAlchemy URL) to use without a configuration file",
    )


@dataclass(frozen=True)
class Source:
    """The opened store, the settings when a configuration was read, and the database's name."""

    store: Store
    settings: Settings | None
    database: str

    @property
    def safety(self) -> SafetyConfig:
        """The configured ``[safety]``, or its defaults when no configuration was read."""
        if self.settings is not None:
            return self.settings.safety
        from watchdog_gpu.safety import SafetyConfig

        return SafetyConfig()


@dataclass(frozen=True)
class ReadSource:
    """What a read-only command reads (:func:`opened_reader`): the store, the settings when a
    configuration was read, and the database's name."""

    store: Store
    settings: Settings | None
    database: str


@contextmanager
def opened_source(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Iterator[Source]:
    """Open the database chosen by ``args.config`` / ``args.db`` (see the module docstring).

    Raises CommandError (exit 2) for an invalid configuration or a database that does not
    exist, and StoreError when it cannot be opened or migrated.
    """
    env = os.environ if environ is None else environ
    settings, url = _choose_database(getattr(args, "config", None), getattr(args, "db", None), env)
    with _opened_store(settings, url) as source:
        yield source


@contextmanager
def opened_reader(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Iterator[ReadSource]:
    """:func:`opened_source` for a command that only reads. Same errors; a SQLite file that does
    not exist is reported before any database library is imported."""
    env = os.environ if environ is None else environ
    settings, url = _choose_database(getattr(args, "config", None), getattr(args, "db", None), env)
    from watchdog_gpu.store.urls import sqlite_file

    path = sqlite_file(url)
    if path is not None:
        _require_file(path, url)
    with _opened_store(settings, url) as source:
        yield ReadSource(source.store, source.settings, source.database)


@contextmanager
def _opened_store(settings: Settings | None, url: str) -> Iterator[Source]:
    from watchdog_gpu.store import Store, create_engine_for, display_url, upgrade_to_head

    shown = display_url(url)
    _require_existing(url, shown)
    engine = create_engine_for(url)
    try:
        upgrade_to_head(engine)
        yield Source(Store(engine), settings, shown)
    finally:
        engine.dispose()


def _choose_database(
    config: Path | None, db: str | None, environ: Mapping[str, str]
) -> tuple[Settings | None, str]:
    from watchdog_gpu.store import sqlite_url

    if db is not None:
        if "://" in db:
            return None, db
        return None, sqlite_url(Path(db).expanduser().absolute())
    # Only here: the loader imports pydantic-settings, which --db never needs.
    from watchdog_gpu.config import (
        CONFIG_ENV_VAR,
        default_database_url,
        find_config_file,
        load_settings,
    )

    named = config is not None or bool(environ.get(CONFIG_ENV_VAR))
    try:
        location = find_config_file(config, environ)
    except ConfigError as error:
        if named:
            raise config_error(error) from None
        return None, default_database_url(environ)
    try:
        settings = load_settings(location.path, environ)
    except ConfigError as error:
        raise config_error(error) from None
    return settings, settings.watchdog.effective_database_url(environ)


def settings_to_act(config: Path | None, environ: Mapping[str, str], purpose: str) -> Settings:
    """The configuration of a command that talks to the providers (``once``, ``doctor``): valid,
    every secret available, at least one account. Raises CommandError (exit 2) listing every
    problem; ``purpose`` ends the no-accounts message ("nothing to poll")."""
    from watchdog_gpu.config import load_settings, resolve_secrets

    try:
        settings = load_settings(config, environ)
    except ConfigError as error:
        raise config_error(error) from None
    missing = resolve_secrets(settings, environ)
    if missing:
        raise config_error(ConfigError(missing), "secrets not available")
    if not settings.accounts:
        raise CommandError(f"no accounts configured ([[accounts]]): {purpose}")
    return settings


def config_error(error: ConfigError, title: str = "invalid configuration") -> CommandError:
    """The CommandError (exit 2) for an unusable configuration: a file-level problem (none
    found, unreadable, not TOML) as it is, otherwise every problem under ``title``."""
    if len(error.problems) == 1 and not error.problems[0].path:
        return CommandError(error.problems[0].message)
    count = len(error.problems)
    return CommandError(
        f"{title} ({count} problem{'s' if count != 1 else ''}):",
        details=[str(problem) for problem in error.problems],
    )


def _require_existing(url: str, shown: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise CommandError("--db: not a database path or URL") from None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    _require_file(Path(parsed.database).expanduser(), shown)


def _require_file(path: Path, shown: str) -> None:
    try:
        exists = path.is_file()
    except PermissionError:
        raise CommandError(
            f"cannot read database {shown}: permission denied",
            details=["the system service's database is private to it: run the command with sudo"],
        ) from None
    if not exists:
        raise CommandError(
            f"database {shown} does not exist",
            details=[
                "nothing has been recorded there yet: start the daemon (`watchdog-gpu run`) or "
                "create it with `watchdog-gpu db upgrade`; check --db / --config"
            ],
        )


# -- the ID argument --------------------------------------------------------------------------


def ref(account: str, instance_id: str) -> str:
    """``account/instance_id``."""
    return f"{account}/{instance_id}"


def describe(record: InstanceRecord) -> str:
    """``vast-main/9001 (train-llama)``."""
    snapshot = record.snapshot
    name = f" ({snapshot.name})" if snapshot.name else ""
    return f"{ref(snapshot.account, snapshot.instance_id)}{name}"


def resolve_instance(records: Sequence[InstanceRecord], text: str) -> InstanceRecord:
    """The recorded instance ``text`` names: ``ACCOUNT/INSTANCE_ID`` or a bare id unique across
    accounts. Raises CommandError (exit 2) listing the known instances (unknown id) or the
    matches (ambiguous bare id)."""
    wanted = text.strip()
    account, slash, instance_id = wanted.partition("/")
    if slash:
        matches = [
            r
            for r in records
            if r.snapshot.account == account and r.snapshot.instance_id == instance_id
        ]
    else:
        matches = [r for r in records if r.snapshot.instance_id == wanted]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CommandError(
            f"instance id {wanted!r} is ambiguous: it exists in {len(matches)} accounts; "
            "write ACCOUNT/INSTANCE_ID, one of:",
            details=[describe(record) for record in matches],
        )
    raise CommandError(f"unknown instance {wanted!r}", details=known_instances(records))


def known_instances(records: Sequence[InstanceRecord]) -> list[str]:
    """Lines naming the recorded instances (present ones first), for error messages."""
    if not records:
        return ["no instances are recorded in this database yet"]
    ordered = sorted(records, key=lambda r: r.snapshot.state is InstanceState.GONE)
    lines = ["recorded instances:"]
    for record in ordered[:LISTED_IDS]:
        gone = " [gone]" if record.snapshot.state is InstanceState.GONE else ""
        lines.append(f"  {describe(record)}{gone}")
    if len(ordered) > LISTED_IDS:
        lines.append(f"  ... and {len(ordered) - LISTED_IDS} more (see `watchdog-gpu status`)")
    return lines


# -- arguments --------------------------------------------------------------------------------


def positive_duration(text: str) -> timedelta:
    """argparse type: ``"2h"`` → 2 hours; longer than zero."""
    from watchdog_gpu.durations import parse_duration

    try:
        value = parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError("must be longer than 0s")
    return value


def parse_since(text: str, now: datetime) -> datetime:
    """``2h`` (that long before ``now``) or an ISO 8601 time (UTC when it has no offset).
    Raises CommandError (exit 2) otherwise."""
    from watchdog_gpu.durations import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"--since: {text!r} is neither a duration (e.g. 2h, 30m, 7d) nor an ISO time "
            "(e.g. 2026-03-02T20:00:00Z)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def program_command(argv0: str | None = None, path: str | None = None) -> str:
    """How to run this ``watchdog-gpu`` again from a shell, as pasted: ``watchdog-gpu`` when that
    name on ``$PATH`` is this program, else its absolute path (``bash scripts/demo`` runs
    ``.venv/bin/watchdog-gpu``, which is not on ``$PATH``), or ``python -m watchdog_gpu``."""
    invoked = sys.argv[0] if argv0 is None else argv0
    if Path(invoked).name in ("__main__.py", "-c", "") or not Path(invoked).exists():
        return f"{shlex.quote(sys.executable)} -m watchdog_gpu"
    found = shutil.which("watchdog-gpu", path=path)
    if found is not None and Path(found).resolve() == Path(invoked).resolve():
        return "watchdog-gpu"
    return shlex.quote(str(Path(invoked).absolute()))


def operator_name() -> str:
    """Who runs the command, for the audit history ("unknown" when the OS cannot say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no $USER/$LOGNAME (containers)
        return "unknown"


# -- output -----------------------------------------------------------------------------------


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    indent: str = "",
    paint: Callable[[int, int, str], str] | None = None,
    width: int | None = None,
) -> list[str]:
    """Fixed-width columns (two spaces apart), a header line, no trailing spaces. ``paint(row,
    column, text)`` may colour a body cell; widths are measured on the plain text. With
    ``width``, a table wider than that narrows its widest columns and wraps their cells onto
    more lines (nothing is cut; a row's first line holds its first cell)."""
    widths = _natural_widths(headers, rows)
    if width is not None:
        widths = _narrowed(widths, headers, width - len(indent) - 2 * (len(headers) - 1))
    lines = []
    for index, row in enumerate((headers, *rows)):
        wrapped = [_wrapped(cell, size) for cell, size in zip(row, widths, strict=True)]
        row_paint = None if paint is None or index == 0 else partial(paint, index - 1)
        for part in range(max(len(cell) for cell in wrapped)):
            line = _table_line([_part(pieces, part) for pieces in wrapped], widths, row_paint)
            lines.append((indent + line).rstrip())
    return lines


def _natural_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's widest cell, its header included."""
    return [
        max([len(header), *(len(row[column]) for row in rows)])
        for column, header in enumerate(headers)
    ]


def _part(pieces: Sequence[str], index: int) -> str:
    """Line ``index`` of a wrapped cell; empty below its last."""
    return pieces[index] if index < len(pieces) else ""


def _table_line(
    cells: Sequence[str], widths: Sequence[int], paint: Callable[[int, str], str] | None
) -> str:
    """One line of a table: each cell padded to its column's width, painted (``paint(column,
    text)``) when given; the padding is measured on the plain text."""
    shown = []
    for column, (cell, column_width) in enumerate(zip(cells, widths, strict=True)):
        painted = paint(column, cell) if paint is not None else cell
        shown.append(painted + " " * (column_width - len(cell)))
    return "  ".join(shown)


# The narrowest a column is made before its cells wrap (a header is never split mid-word).
_MIN_COLUMN = 6


def _narrowed(widths: list[int], headers: Sequence[str], budget: int) -> list[int]:
    """``widths`` with the widest columns narrowed, one character at a time, until they fit in
    ``budget`` or every column is at its minimum. The first column (what the row is about: an
    instance, an account) is narrowed last."""
    floors = [
        min(width, max(_MIN_COLUMN, *(len(word) for word in header.split())))
        for width, header in zip(widths, headers, strict=True)
    ]
    widths = list(widths)
    while sum(widths) > budget:
        narrowable = [column for column, width in enumerate(widths) if width > floors[column]]
        if not narrowable:
            break
        others = [column for column in narrowable if column > 0]
        widest = max(others or narrowable, key=lambda column: widths[column])
        widths[widest] -= 1
    return widths


def _wrapped(cell: str, width: int) -> list[str]:
    if len(cell) <= width:
        return [cell]
    return textwrap.wrap(cell, width, break_on_hyphens=False) or [cell[:width]]


def output_width(stream: TextIO, environ: Mapping[str, str] | None = None) -> int | None:
    """How many columns text written to ``stream`` may take: ``$COLUMNS`` when it is set (a
    positive number), else the terminal's width when ``stream`` is a terminal; ``None`` — no
    limit — for a pipe or a file, so ``… | grep`` and scripts get whole lines."""
    env = os.environ if environ is None else environ
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):  # closed, not a real file, no size
        return None
    return None


def fitted(lines: Iterable[str], width: int | None) -> list[str]:
    """``lines`` of prose wrapped to ``width`` (continuations indented two spaces more than the
    line they continue); unchanged without a width."""
    if width is None:
        return list(lines)
    shown: list[str] = []
    for line in lines:
        if len(line) <= width:
            shown.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip(" ")))
        shown += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=lead,
            subsequent_indent=lead + "  ",
            break_on_hyphens=False,
        )
    return shown


def print_lines(lines: Sequence[str], out: TextIO | None = None) -> None:
    print("\n".join(lines), file=out or sys.stdout)


def json_time(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` (``None`` stays ``None``)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def print_json(value: Any, out: TextIO | None = None) -> None:
    """One JSON document on stdout (keys in the order given, non-ASCII kept)."""
    print(json.dumps(value, ensure_ascii=False, indent=2), file=out or sys.stdout)


def timestamp(moment: datetime) -> str:
    """``2026-03-02 20:31:05 UTC`` (the audit history's precision)."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
