"""``watchdog-gpu demo [--speed X] [--db PATH [--force]]``: a simulated night in under a minute.

Runs the real daemon (the code of ``watchdog-gpu run``) against the built-in provider simulator
on 127.0.0.1 through a scripted night — a busy training run, a forgotten idle card, an outbid
interruptible, a stopped big disk, a protected server and a runaway 8×H100 that breaks the
budget — on a clock ``--speed`` times faster than real time (default 720: 8 h in 40 s), in
enforce mode against the simulated accounts. It prints what happens as it happens (the script,
the watchdog's decisions and actions, the messages the phone receives, in virtual time), then
what was done and the money spent with and without the watchdog: what the simulated providers
billed, and the total the watchdog's own ledger recorded (``watchdog-gpu report``), which equals
it to the cent. No account, no configuration file, no network beyond 127.0.0.1.

The database stays for ``watchdog-gpu status --db PATH``, ``watchdog-gpu events --db PATH`` and
``watchdog-gpu report --db PATH``:
by default a new file ``watchdog-gpu-demo.db`` in the current directory (``-2``, ``-3``, … when
that exists); ``--db PATH`` refuses an existing file unless ``--force``.

Exit codes: 0 the night was played; 1 the daemon could not start; 2 bad usage; 130 interrupted
(Ctrl-C: the daemon stops cleanly and the night so far is summarised).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.commands.common import program_command
from watchdog_gpu.errors import StoreError

DEFAULT_DATABASE = Path("watchdog-gpu-demo.db")
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the command line."""
    parser = subparsers.add_parser(
        "demo",
        help=summary("demo"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument(
        "--speed",
        type=_speed,
        default=None,
        metavar="X",
        help="virtual seconds per real second (default 720: the 8 h night in 40 s)",
    )
    parser.add_argument(
        "--db",
        type=Path,
        metavar="PATH",
        help="the SQLite file to create (default: a new watchdog-gpu-demo.db here)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --db file")
    parser.set_defaults(handler=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    """Play the night; the exit code of :func:`watchdog_gpu.sim.demo.run_demo`, or 2 when the
    database path cannot be used."""
    from watchdog_gpu.sim.demo import DEFAULT_SPEED, run_demo
    from watchdog_gpu.sim.demo_report import print_result

    database = _database_path(args.db, force=args.force)
    if database is None:
        return EXIT_USAGE
    # Titles carry "×", "≥" and the like: never let a non-UTF-8 terminal end the demo.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if callable(reconfigure):
        reconfigure(errors="replace")
    speed = args.speed or DEFAULT_SPEED
    try:
        code, result = run_demo(database, speed=speed, out=sys.stdout)
    except (StoreError, OSError) as error:  # the database or a loopback port is not usable
        print(f"cannot run the demo: {error}", file=sys.stderr)
        return EXIT_FAILURE
    if result is not None:
        print_result(result, sys.stdout, database=database, program=program_command())
    return code


def _database_path(given: Path | None, *, force: bool) -> Path | None:
    """The absolute path of the new database, or None (reason on stderr) when unusable."""
    if given is None:
        return _fresh_default(Path.cwd())
    path = given.expanduser().absolute()
    if path.is_dir():
        print(f"--db {given}: is a directory", file=sys.stderr)
        return None
    if path.exists():
        if not force:
            print(f"--db {given}: the file exists (use --force to replace it)", file=sys.stderr)
            return None
        for name in (path.name, *(path.name + side for side in SQLITE_SIDE_FILES)):
            (path.parent / name).unlink(missing_ok=True)
    if not path.parent.is_dir():
        print(f"--db {given}: no directory {path.parent}", file=sys.stderr)
        return None
    return path


def _fresh_default(directory: Path) -> Path:
    """``watchdog-gpu-demo.db`` in ``directory``, or the first ``-N`` variant that is free."""
    candidate = directory / DEFAULT_DATABASE
    number = 2
    while candidate.exists():
        candidate = directory / f"{DEFAULT_DATABASE.stem}-{number}{DEFAULT_DATABASE.suffix}"
        number += 1
    return candidate


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError("must be between 1 and 100000")
    return value
