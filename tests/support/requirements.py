"""Skip-or-fail for tests that need a real external program (sshd, prometheus, promtool).

On a developer's laptop without the program the test is skipped with a hint; in CI (``CI`` set to
a true value, as ``.ci/run`` runs) a missing program is a failure, so a broken install step can
never hide behind a skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_program(name: str, *candidates: str, hint: str = "") -> str:
    """The path of ``name`` (looked up on PATH and in ``candidates``), or skip/fail."""
    found = shutil.which(name)
    if found is None:
        found = next((path for path in candidates if Path(path).is_file()), None)
    if found is not None:
        return found
    message = f"{name} is not installed{': ' + hint if hint else ''}"
    if running_in_ci():
        pytest.fail(f"{message} (CI must install it: see .ci/run)")
    pytest.skip(message)
