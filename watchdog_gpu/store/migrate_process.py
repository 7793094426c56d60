"""Migrate a database in a child process, so the daemon never imports Alembic.

A module once imported stays resident for the daemon's months, and Alembic, Mako and Pygments
are ≈ 14 MiB. A database at head is recognised without Alembic and starts no child; short-lived
commands migrate in their own process. The URL reaches the child on its stdin, never its command
line (it may hold a password); the child answers with one JSON line, and its errors come back as
themselves.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from watchdog_gpu.errors import SchemaTooNewError, StoreError
from watchdog_gpu.store.engine import create_engine_for, display_url
from watchdog_gpu.store.migrate import MigrationResult, revision_if_at_head

logger = logging.getLogger(__name__)

# The package's parent directory: the child finds watchdog_gpu there even when the daemon was
# started from a checkout without installing it.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def upgrade_in_child_process(engine: Engine, database_url: str) -> MigrationResult:
    """Bring the database behind ``engine`` (opened on ``database_url``) to head: at once when it
    is there, else in a child process (module doc). Raises what ``upgrade_to_head`` raises."""
    at_head = revision_if_at_head(engine)
    if at_head is not None:
        return MigrationResult(before=at_head, after=at_head)
    answer = _run_child(database_url, display_url(engine))
    result = MigrationResult(before=answer.get("before"), after=answer.get("after"))
    if result.changed:
        logger.info(
            "database migrated from_revision=%s to_revision=%s", result.before, result.after
        )
    return result


def _run_child(database_url: str, shown: str) -> dict[str, Any]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(_PACKAGE_ROOT), environment.get("PYTHONPATH", "")) if part
    )
    try:
        completed = subprocess.run(
            [sys.executable, "-m", __name__],
            input=database_url,
            capture_output=True,
            text=True,
            env=environment,
            check=False,
        )
    except OSError as error:
        raise StoreError(
            f"cannot start the migration of {shown} in a child process: {error}"
        ) from error
    answer = _answer(completed.stdout)
    if answer is None:
        raise StoreError(
            f"the migration of {shown} failed: its process exited with status "
            f"{completed.returncode} ({_last_line(completed.stderr, database_url)})"
        )
    failure = answer.get("error")
    if failure == "schema_too_new":
        raise SchemaTooNewError(str(answer["revision"]), str(answer["database"]))
    if failure is not None:
        raise StoreError(str(answer.get("message", "the migration failed")))
    return answer


def _answer(stdout: str) -> dict[str, Any] | None:
    lines = stdout.strip().splitlines()
    if not lines:
        return None
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _last_line(stderr: str, database_url: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "no message"
    password = make_url(database_url).password
    if password:
        line = line.replace(str(password), "***")
    return line


def main() -> int:
    """The child: read the URL from stdin, migrate, print one JSON line (module doc)."""
    from watchdog_gpu.store.migrate import upgrade_to_head

    database_url = sys.stdin.read().strip()
    try:
        result = upgrade_to_head(create_engine_for(database_url))
    except SchemaTooNewError as error:
        answer: dict[str, Any] = {
            "error": "schema_too_new",
            "revision": error.revision,
            "database": error.database,
        }
    except StoreError as error:
        answer = {"error": "store", "message": str(error)}
    else:
        answer = {"before": result.before, "after": result.after}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
