"""Run a script in a fresh Python interpreter: what a module imports, or leaves loaded, can only
be seen in a process that imported nothing before it."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(script: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``script`` run by this interpreter in a new process; raises when it fails."""
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, check=True
    )
