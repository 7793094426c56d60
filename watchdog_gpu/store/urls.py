"""Database URLs read without SQLAlchemy: what a command needs to tell a plain SQLite file (one
that must exist before it is opened) from anything else."""

from __future__ import annotations

import re
from pathlib import Path

# sqlite:///relative.db, sqlite:////absolute.db — no query string (URI options, drivers'
# parameters: those go through SQLAlchemy).
_PLAIN_SQLITE = re.compile(r"sqlite:///(?P<path>[^?#]+)")


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of the SQLite file at ``path``."""
    return f"sqlite:///{path}"


def sqlite_file(url: str) -> Path | None:
    """The file of a plain SQLite URL (``sqlite:///PATH`` without options, not in memory);
    None for any other URL."""
    match = _PLAIN_SQLITE.fullmatch(url)
    if match is None or match["path"] == ":memory:":
        return None
    return Path(match["path"]).expanduser()
