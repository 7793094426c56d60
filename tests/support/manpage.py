"""Build ``docs/watchdog-gpu.1``, the man page, from the command line's own parser with
argparse-manpage (a dev dependency). ``python -m tests.support.manpage`` rewrites the file;
tests/unit/cli/test_manpage.py fails while the shipped page differs from the parser."""

from __future__ import annotations

import os
import re
from pathlib import Path

from argparse_manpage.manpage import Manpage

from watchdog_gpu import __version__
from watchdog_gpu.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "watchdog-gpu.1"
# The .TH line's date field: the day the page was built (set with SOURCE_DATE_EPOCH, or today).
_TH_DATE = re.compile(r'^(\.TH \S+ "\d+") "[^"]*"', re.MULTILINE)
# argparse wraps usage lines to the terminal: a fixed width makes the page the same everywhere.
_WIDTH = "80"


def render(date: str | None = None) -> str:
    """The man page of the current parser (every command and option, from its ``--help``)."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _WIDTH
    try:
        data: dict[str, object] = {
            "prog": "watchdog-gpu",
            "project_name": "watchdog-gpu",
            "version": __version__,
            "description": "stop rented GPUs from burning money, never kill a busy one",
            "manual_section": "1",
            "manual_title": "watchdog-gpu manual",
        }
        if date is not None:
            data["date"] = date
        return str(Manpage(build_parser(), _data=data))
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def without_date(page: str) -> str:
    """``page`` with its build date blanked (the only part that may differ between builds)."""
    return _TH_DATE.sub(r'\1 ""', page)


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
