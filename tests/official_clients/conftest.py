"""Conformance of the simulated dialects with the providers' own Python clients.

The official ``vastai`` and ``runpod`` packages cannot share an environment (runpod needs
cryptography >= 50, vastai pins 49) and neither is a dependency of watchdog-gpu, so each lives in
its own virtual environment built by ``scripts/official-client-venvs DIR`` and found through
``WATCHDOG_GPU_CLIENT_VENVS=DIR``. A small driver script per client runs with that venv's python
as a subprocess, pointed at the simulator the way a user points the client at a server
(``VAST_URL``, ``RUNPOD_API_BASE_URL``).

On a laptop without the venvs these tests skip with a hint; in CI (``CI`` true) they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.requirements import running_in_ci
from tests.support.sim_world import ServedWorld, served_world

DRIVERS = Path(__file__).resolve().parent / "drivers"
VENVS_VARIABLE = "WATCHDOG_GPU_CLIENT_VENVS"


def _skip_or_fail(message: str) -> None:
    hint = f"{message}; build them with scripts/official-client-venvs DIR and set {VENVS_VARIABLE}"
    if running_in_ci():
        pytest.fail(f"{hint} (CI must provide them)")
    pytest.skip(hint)


@pytest.fixture(scope="session")
def client_venvs() -> Path:
    """The directory holding the ``vastai`` and ``runpod`` virtual environments."""
    raw = os.environ.get(VENVS_VARIABLE, "")
    if not raw:
        _skip_or_fail(f"{VENVS_VARIABLE} is not set")
    root = Path(raw)
    for name in ("vastai", "runpod"):
        if not (root / name / "bin" / "python").is_file():
            _skip_or_fail(f"no {name} virtual environment in {root}")
    return root


@dataclass
class OfficialClient:
    """Runs one official client's driver script against the simulated world."""

    python: Path
    driver: Path
    environment: Mapping[str, str]

    def run(self, *arguments: str) -> Any:
        """The client's return value for ``arguments`` (decoded from the driver's JSON)."""
        result = self.call(*arguments)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout)

    def call(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), str(self.driver), *arguments],
            capture_output=True,
            text=True,
            env=dict(self.environment),
            timeout=120,
            check=False,
        )


@pytest.fixture
def sim() -> Iterator[ServedWorld]:
    with served_world() as served:
        yield served


def base_environment(home: Path) -> dict[str, str]:
    # A private HOME so neither client finds a real key file or writes a config of its own;
    # VASTAI_NO_UPDATE_CHECK keeps the vastai CLI from asking the internet for a newer release.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "VASTAI_NO_UPDATE_CHECK": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@pytest.fixture
def vastai(client_venvs: Path, sim: ServedWorld, tmp_path: Path) -> OfficialClient:
    environment = base_environment(tmp_path)
    environment.update(VAST_URL=sim.url("vast"), VAST_API_KEY="sim-vast-a")
    return OfficialClient(
        client_venvs / "vastai" / "bin" / "python", DRIVERS / "vastai_driver.py", environment
    )


@pytest.fixture
def runpod(client_venvs: Path, sim: ServedWorld, tmp_path: Path) -> OfficialClient:
    environment = base_environment(tmp_path)
    environment.update(RUNPOD_API_BASE_URL=sim.url("runpod"), RUNPOD_API_KEY="sim-runpod-a")
    return OfficialClient(
        client_venvs / "runpod" / "bin" / "python", DRIVERS / "runpod_driver.py", environment
    )
