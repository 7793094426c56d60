"""``watchdog-gpu db upgrade [--database-url URL] [--config PATH]``: migrate the database;
``watchdog-gpu db copy --from URL --to URL``: move a whole history to another database.

Creates the tables of an empty database, or brings an older one to the newest revision; running
it again changes nothing. The daemon migrates by itself at start-up too; this command is for
doing it ahead (e.g. in a deploy step, after taking a copy of the file). Exit 2 while a daemon
runs on the database (stop it first: it would run on tables changing under it) or when a newer
watchdog-gpu wrote it; 1 when it cannot be opened or migrated.

Which database: ``--database-url``, else the configuration's (``--config PATH``,
``$WATCHDOG_GPU_CONFIG`` or the usual places), the one the daemon opens: ``[watchdog]
database_url``, else ``watchdog-gpu.db`` in the state directory (``$STATE_DIRECTORY``;
``/var/lib/watchdog-gpu`` for a configuration in ``/etc/watchdog-gpu``;
``$XDG_STATE_HOME/watchdog-gpu`` or ``~/.local/state/watchdog-gpu``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.commands.database_check import missing_sqlite_file
from watchdog_gpu.errors import ConfigError, DatabaseInUseError, SchemaTooNewError, StoreError

if TYPE_CHECKING:
    from sqlalchemy import URL, Engine

    from watchdog_gpu.store.copy import CopyResult


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``db upgrade`` to the command line."""
    db = subparsers.add_parser(
        "db",
        help=summary("db"),
        description="Manage the watchdog's database: `db upgrade` creates or migrates it, "
        "`db copy` moves a whole history into a new, empty database.",
    )
    actions = db.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    upgrade = actions.add_parser(
        "upgrade",
        help="create or migrate the database to the newest schema",
        description=doc_paragraph(__doc__),
    )
    upgrade.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy URL, e.g. sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db",
    )
    upgrade.add_argument("--config", type=Path, metavar="PATH", help="configuration file")
    upgrade.set_defaults(handler=run_upgrade)
    copy = actions.add_parser(
        "copy",
        help="copy a whole database into a new, empty one (e.g. SQLite to PostgreSQL)",
        description=(
            "Copy every table and row of --from into the empty database --to (migrated first), "
            "in one transaction: the way an installation moves its history from its SQLite "
            "file to a team's PostgreSQL (docs/postgresql.md). --from is only read; stop the "
            "daemon first so that nothing is written to it meanwhile. A password is best given "
            "in $WATCHDOG_GPU_DATABASE_PASSWORD (for --to) rather than in the URL."
        ),
    )
    copy.add_argument("--from", dest="source", required=True, metavar="URL", help="source URL")
    copy.add_argument("--to", dest="target", required=True, metavar="URL", help="target URL")
    copy.set_defaults(handler=run_copy)


def run_upgrade(args: argparse.Namespace) -> int:
    """Migrate the chosen database to head; print what happened."""
    try:
        url = database_url(args.database_url, args.config)
    except ConfigError as error:
        for problem in error.problems:
            print(f"config: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from sqlalchemy.exc import ArgumentError

    from watchdog_gpu.store import create_engine_for, display_url, upgrade_to_head
    from watchdog_gpu.store.lock import database_lock

    try:
        engine = create_engine_for(url)
    except (ArgumentError, ValueError):
        # Not the URL itself in the message: it may carry a password.
        print("--database-url: not a database URL (e.g. sqlite:////path/to.db)", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # the database's directory cannot be created
        print(f"cannot open the database {display_url(url)}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    # A migration under a running daemon could change tables it is using: refuse while one runs.
    lock = database_lock(url, role="db upgrade")
    try:
        lock.acquire()
        result = upgrade_to_head(engine)
    except (SchemaTooNewError, DatabaseInUseError) as error:
        print(str(error), file=sys.stderr)
        return EXIT_USAGE
    except StoreError as error:
        print(str(error), file=sys.stderr)
        return EXIT_FAILURE
    finally:
        lock.release()
        engine.dispose()
    shown = display_url(url)
    if result.changed:
        print(f"database {shown} migrated from {result.before or '(empty)'} to {result.after}")
    else:
        print(f"database {shown} is up to date (revision {result.after})")
    return EXIT_OK


PASSWORD_VARIABLE = "WATCHDOG_GPU_DATABASE_PASSWORD"  # noqa: S105 - a variable name


def run_copy(args: argparse.Namespace) -> int:
    """Copy --from into --to; print how many rows per table."""
    from watchdog_gpu.store import display_url

    engines = []
    for option, given in (("--from", args.source), ("--to", args.target)):
        engine = _engine_for(option, given)
        if isinstance(engine, int):
            return engine
        engines.append(engine)
    source, target = engines
    try:
        result = _copy_unless_in_use(source, target)
    finally:
        source.dispose()
        target.dispose()
    if isinstance(result, int):
        return result
    for table, count in result.rows:
        print(f"  {table:<20} {count:>9} rows")
    print(f"copied {result.total} rows from {display_url(source)} to {display_url(target)}")
    return EXIT_OK


def _engine_for(option: str, given: str) -> Engine | int:
    """The engine of the URL given to ``option`` (--from or --to), or the exit code after
    saying on stderr why there is none."""
    from sqlalchemy.exc import ArgumentError

    from watchdog_gpu.store import create_engine_for, display_url

    url = _url_of(option, given)
    if url is None:
        # Not the URL itself in the message: it may carry a password.
        print(f"{option}: not a database URL (e.g. sqlite:////path/to.db)", file=sys.stderr)
        return EXIT_USAGE
    if option == "--from" and missing_sqlite_file(url):
        print(f"--from: no database file at {display_url(url)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return create_engine_for(url)
    except (ArgumentError, ValueError, ImportError) as error:
        print(f"{option}: cannot use {display_url(url)}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"cannot open the database {display_url(url)}: {error}", file=sys.stderr)
        return EXIT_FAILURE


def _url_of(option: str, given: str) -> URL | None:
    """``given`` parsed (None when it is no URL), its password kept out of the logs; the
    target takes ``$WATCHDOG_GPU_DATABASE_PASSWORD`` when it has none of its own."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from watchdog_gpu.log import register_secret

    try:
        url = make_url(given)
    except (ArgumentError, ValueError):
        return None
    if url.password:
        register_secret(str(url.password))
    password = os.environ.get(PASSWORD_VARIABLE)
    if option == "--to" and password and url.password is None:
        register_secret(password)
        url = url.set(password=password)
    return url


def _copy_unless_in_use(source: Engine, target: Engine) -> CopyResult | int:
    """Copy, or the exit code. A daemon writing the source while it is copied would leave a copy
    of no moment: refused while one holds it (an SQLite source's lock is held meanwhile, so
    none starts)."""
    from watchdog_gpu.store import display_url
    from watchdog_gpu.store.copy import copy_database
    from watchdog_gpu.store.lock import NoLock, database_lock

    postgres = source.dialect.name == "postgresql"
    url = source.url.render_as_string(hide_password=False)
    lock = NoLock() if postgres else database_lock(url, role="db copy")
    try:
        if postgres:
            from watchdog_gpu.store.leadership import someone_leads

            if someone_leads(source):
                print(
                    f"--from: a watchdog-gpu daemon leads on {display_url(source)}: stop every "
                    "node first (a database in use changes while it is copied)",
                    file=sys.stderr,
                )
                return EXIT_USAGE
        lock.acquire()
        return copy_database(source, target)
    except DatabaseInUseError as error:
        print(f"--from: {error}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as error:
        print(str(error), file=sys.stderr)
        return EXIT_FAILURE
    finally:
        lock.release()


def database_url(given: str | None, config_path: Path | None) -> str:
    """The URL to migrate: ``given``, else the configuration's, else the default file.

    Raises ConfigError when a configuration file is named (``--config`` or
    ``$WATCHDOG_GPU_CONFIG``) but missing, or found but invalid.
    """
    if given:
        return given
    from watchdog_gpu.config import (
        CONFIG_ENV_VAR,
        default_database_url,
        find_config_file,
        load_settings,
    )

    named = config_path is not None or bool(os.environ.get(CONFIG_ENV_VAR))
    try:
        location = find_config_file(config_path)
    except ConfigError:
        if named:
            raise
        return default_database_url()  # no configuration anywhere: the documented default
    return load_settings(location.path).watchdog.effective_database_url()
