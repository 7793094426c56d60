"""A real PostgreSQL server on 127.0.0.1 for the tests that need one.

Started by the tests themselves: a copy of a data directory ``initdb`` built once per test
process, ``pg_ctl start`` on a free loopback port with its socket in that directory, ``trust``
authentication for the loopback only.
Debian's ``postgresql`` package provides the binaries under ``/usr/lib/postgresql/<major>/bin``
(``.ci/run`` installs it). PostgreSQL refuses to run as root, so as root the data directory is
handed to the ``postgres`` system user and the server runs as that user (``runuser``).

Each test that asks for a database gets a new, empty one (``CREATE DATABASE``), so tests never see
each other's rows.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.requirements import require_program

_START_SECONDS = 60


def postgres_bindir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: on PATH, else Debian's newest versioned one."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return candidates[-1].parent if candidates else None


def require_postgres() -> Path:
    """The PostgreSQL bin directory, or skip (laptop) / fail (CI) when it is not installed."""
    bindir = postgres_bindir()
    candidate = str(bindir / "initdb") if bindir is not None else "/nonexistent/initdb"
    require_program("initdb", candidate, hint="apt-get install postgresql")
    assert bindir is not None
    return bindir


_template: Path | None = None


def _template_datadir(server: PostgresServer) -> Path:
    """A data directory ``initdb`` built once in this process (never started: copies of it
    hold no server state), removed when the process exits."""
    global _template  # noqa: PLW0603 - built once per test process, on first use
    if _template is None:
        workdir = Path(tempfile.mkdtemp(prefix="watchdog-gpu-pg-template-"))
        atexit.register(shutil.rmtree, workdir, True)
        server.hand_to_postgres(workdir)
        server.initdb(workdir / "data")
        _template = workdir / "data"
    return _template


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server process on 127.0.0.1:``port`` with its data under ``workdir``."""

    def __init__(self, bindir: Path, workdir: Path) -> None:
        self.bindir = bindir
        self.workdir = workdir
        self.datadir = workdir / "data"
        self.port = _free_port()
        self.log_path = workdir / "postgres.log"
        self._as_root = os.geteuid() == 0

    def _run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)

    def start(self) -> None:
        """Start a new server on a copy of this process's ``initdb``-built data directory."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.hand_to_postgres(self.workdir)
        # A copy takes a tenth of a second where initdb takes one to three: the failover and
        # fault tests start a server of their own per test, each xdist worker one for the rest.
        copied = self._run(["cp", "-a", str(_template_datadir(self)), str(self.datadir)])
        if copied.returncode != 0:
            raise RuntimeError(f"copying the template data directory failed: {copied.stderr}")
        self.start_again()

    def hand_to_postgres(self, directory: Path) -> None:
        """Make ``directory`` the server user's alone (mode 0700), as PostgreSQL requires."""
        if self._as_root:
            user = pwd.getpwnam("postgres")
            os.chown(directory, user.pw_uid, user.pw_gid)
        directory.chmod(0o700)

    def initdb(self, datadir: Path) -> None:
        initdb = self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(datadir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ]
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {initdb.stderr.strip()}")

    def start_again(self) -> None:
        """Start the server on its existing data directory (after :meth:`stop`)."""
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.workdir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        started = self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(self.log_path),
                "-o",
                options,
                "-w",
                "-t",
                str(_START_SECONDS),
                "start",
            ]
        )
        if started.returncode != 0:
            log = self.log_path.read_text() if self.log_path.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()} {log[-2000:]}")

    def stop(self) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, template: str | None = None) -> str:
        """A new database, empty or a copy of the database ``template`` (which nobody may be
        connected to); returns its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        copy = f' TEMPLATE "{template}"' if template is not None else ""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                user="postgres",
                dbname="postgres",
                autocommit=True,
            ) as connection,
        ):
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def running_postgres(workdir: Path) -> Iterator[PostgresServer]:
    server = PostgresServer(require_postgres(), workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
