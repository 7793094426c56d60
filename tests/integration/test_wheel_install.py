"""The built wheel, installed on its own (not editable) in a fresh virtual environment, can run
and migrate a database: the migrations ship inside the package.

Builds with ``pip wheel`` (hatchling is the backend) and installs the dependencies from the
package index through pip's cache, so it needs the index the project's CI uses anyway.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(*command: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv with only the built wheel (and its dependencies)."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, REPOSITORY, cwd=root)
    (wheel,) = dist.glob("watchdog_gpu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "watchdog_gpu/migrations/env.py" in names
    assert any(name.startswith("watchdog_gpu/migrations/versions/") for name in names)
    venv = root / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=root)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=root)
    return venv / "bin"


def test_the_installed_command_prints_its_help(installed: Path, tmp_path: Path) -> None:
    result = _run(installed / "watchdog-gpu", "--help", cwd=tmp_path)

    assert "db" in result.stdout


def test_the_installed_package_migrates_from_its_own_copy_of_the_migrations(
    installed: Path, tmp_path: Path
) -> None:
    result = _run(
        installed / "python",
        "-c",
        "from watchdog_gpu.store.revisions import migrations_directory as m; print(m())",
        cwd=tmp_path,
    )

    location = Path(result.stdout.strip())
    assert location.is_relative_to(installed.parent)
    assert location.parts[-2:] == ("watchdog_gpu", "migrations")


def test_the_installed_db_upgrade_creates_the_tables_and_a_second_run_changes_nothing(
    installed: Path, tmp_path: Path
) -> None:
    database = tmp_path / "x.db"
    url = f"sqlite:///{database}"

    first = _run(installed / "watchdog-gpu", "db", "upgrade", "--database-url", url, cwd=tmp_path)
    with sqlite3.connect(database) as connection:
        schema = connection.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    second = _run(installed / "watchdog-gpu", "db", "upgrade", "--database-url", url, cwd=tmp_path)

    assert "migrated from (empty)" in first.stdout
    assert "is up to date" in second.stdout
    assert {"instances", "instance_spans", "actions", "notifications"} <= {n for n, _ in schema}
    with sqlite3.connect(database) as connection:
        assert (
            connection.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
            == schema
        )
