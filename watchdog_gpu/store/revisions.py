"""The shipped migrations' revisions, read from the scripts' text without Alembic or SQLAlchemy.

``upgrade_to_head`` recognises a database already at head with them (``store/migrate.py``)
without importing Alembic: the head is derived from the scripts themselves, so a new
migration needs no constant updated, and ``tests/integration/test_migrations.py`` keeps it equal
to Alembic's head.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from watchdog_gpu.errors import StoreError

_SOURCE_CHECKOUT_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def migrations_directory() -> Path:
    """The directory holding ``env.py`` and ``versions/``: the installed copy inside the package
    when there is one, else the source checkout's top-level ``migrations/``.

    Raises StoreError when neither exists (a broken install).
    """
    packaged = resources.files("watchdog_gpu") / "migrations"
    if packaged.is_dir() and (packaged / "env.py").is_file():
        return Path(str(packaged))
    if (_SOURCE_CHECKOUT_MIGRATIONS / "env.py").is_file():
        return _SOURCE_CHECKOUT_MIGRATIONS
    raise StoreError("the database migrations are missing from this installation")


_SCRIPT_REVISION = re.compile(
    r"^(?P<name>down_revision|revision)\b[^=\n]*=\s*(?P<value>.+)$", re.MULTILINE
)
_QUOTED = re.compile(r"[\"']([^\"']+)[\"']")


@dataclass(frozen=True, slots=True)
class ScriptHistory:
    """The scripts' revisions as their text reads: the single head and every revision."""

    head: str
    revisions: frozenset[str]


@functools.cache
def shipped_history() -> ScriptHistory | None:
    """The shipped scripts' history (see :func:`read_scripts`); None when it cannot be read
    that way (then only Alembic decides)."""
    try:
        return read_scripts(migrations_directory() / "versions")
    except (StoreError, OSError):
        return None


def shipped_head() -> str | None:
    """The head revision of the shipped scripts, read without importing Alembic; a test keeps
    it equal to Alembic's head."""
    history = shipped_history()
    return history.head if history is not None else None


def head_of_scripts(versions: Path) -> str | None:
    """The one ``revision`` in the scripts under ``versions`` that no script names as its
    ``down_revision`` (see :func:`read_scripts`)."""
    history = read_scripts(versions)
    return history.head if history is not None else None


def read_scripts(versions: Path) -> ScriptHistory | None:
    """The revisions of the scripts under ``versions``, read from their text. ``None`` when they
    do not read as a history with a single head (a merge not yet merged, a script this reading
    does not understand): then only Alembic decides."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted(versions.glob("*.py")):
        matches = list(_SCRIPT_REVISION.finditer(script.read_text(encoding="utf-8")))
        found = {match["name"]: _QUOTED.findall(match["value"]) for match in matches}
        if len(matches) != 2 or len(found.get("revision", ())) != 1 or len(found) != 2:
            return None
        revisions.update(found["revision"])
        parents.update(found["down_revision"])
    heads = revisions - parents
    if len(heads) != 1:
        return None
    return ScriptHistory(head=heads.pop(), revisions=frozenset(revisions))
