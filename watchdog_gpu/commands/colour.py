"""Colour for the operator commands' states, on a terminal only.

Colour goes to a stream only when it is a terminal, ``$NO_COLOR`` is unset or empty
(https://no-color.org) and ``$TERM`` is not ``dumb``; pipes, files and journald get plain text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

_CODES = {"green": "32", "yellow": "33", "red": "31", "bold red": "1;31"}


def colour_enabled(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether text written to ``stream`` may carry ANSI colour."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def paint(text: str, colour: str | None, enabled: bool) -> str:
    """``text`` in ``colour`` (green, yellow, red, bold red) when ``enabled``."""
    if not enabled or colour is None or not text:
        return text
    return f"\x1b[{_CODES[colour]}m{text}\x1b[0m"
