"""A real OpenSSH sshd on 127.0.0.1 for the probe's integration tests.

The server logs in ``root`` with a generated client key only. ``authorized_keys`` sets ``PATH`` so
that ``tests/fixtures/fakebin/nvidia-smi`` comes first, and ``WATCHDOG_FAKE_GPU_STATE`` so the fake
knows which files to replay (``PermitUserEnvironment`` allows exactly these two variables): the
probe's command text stays exactly what production sends. Recipe: ecosystem notes §7.

Needs root (sshd's privilege separation) and ``/run/sshd``; the caller decides whether a missing
sshd skips or fails (``tests/support/requirements.py``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from watchdog_gpu.clock import SystemClock

FAKEBIN = Path(__file__).resolve().parents[1] / "fixtures" / "fakebin"
_START_SECONDS = 10.0


def write_ed25519_key(path: Path) -> str:
    """Write a new ed25519 private key (OpenSSH format, mode 0600) to ``path`` and return its
    public key line (``ssh-ed25519 AAAA…``)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    path.write_bytes(private)
    path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class ClientKey:
    path: Path
    public_line: str


class SshServer:
    """One sshd process on 127.0.0.1:``port``, restartable with a new host key.

    ``client``: accept this existing client key instead of generating one (two hosts that one
    account's key logs in to).

    ``light_home``: the sessions get ``HOME`` set to an empty directory of their own, so the
    login shell (root's bash, which sshd runs for every session and which reads ``~/.bashrc``
    even for a command) finds no rc file. The benchmark uses it: its hundreds of sessions share
    the watchdog's cores, where a rented host's login shell runs on the host's own CPU; the
    tests keep root's real login shell."""

    def __init__(
        self,
        sshd: str,
        workdir: Path,
        *,
        port: int | None = None,
        client: ClientKey | None = None,
        light_home: bool = False,
    ) -> None:
        self.sshd = sshd
        self.workdir = workdir
        self.port = port or free_port()
        self.state_dir = workdir / "fake-gpu"
        self.state_dir.mkdir(mode=0o755, exist_ok=True)
        self.host_key_path = workdir / "ssh_host_ed25519_key"
        self.host_public_line = write_ed25519_key(self.host_key_path)
        self.client = client or self._new_client_key("client_ed25519")
        self.config_path = workdir / "sshd_config"
        self.log_path = workdir / "sshd.log"
        self.home: Path | None = None
        if light_home:
            self.home = workdir / "home"
            self.home.mkdir(mode=0o700, exist_ok=True)
        self._process: subprocess.Popen[bytes] | None = None
        self._write_authorized_keys()
        self._write_config()

    @property
    def host_key_base64(self) -> str:
        return self.host_public_line.split()[1]

    def _new_client_key(self, name: str) -> ClientKey:
        path = self.workdir / name
        return ClientKey(path, write_ed25519_key(path))

    def _write_authorized_keys(self) -> None:
        options = (
            f'environment="PATH={FAKEBIN}:/usr/bin:/bin",'
            f'environment="WATCHDOG_FAKE_GPU_STATE={self.state_dir}"'
        )
        if self.home is not None:
            options += f',environment="HOME={self.home}"'

        (self.workdir / "authorized_keys").write_text(f"{options} {self.client.public_line}\n")

    def _write_config(self) -> None:
        self.config_path.write_text(
            "\n".join(
                (
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key_path}",
                    f"PidFile {self.workdir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitUserEnvironment PATH,WATCHDOG_FAKE_GPU_STATE,HOME",
                    "MaxStartups 100:30:200",
                    "MaxSessions 20",
                    "PrintMotd no",
                    "LogLevel VERBOSE",
                    "",
                )
            )
        )

    def start(self) -> None:
        """Start sshd and wait until it accepts connections; raise with its log if it dies."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation directory
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                [self.sshd, "-D", "-e", "-f", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        self._wait_until_listening()

    def _wait_until_listening(self) -> None:
        clock = SystemClock()  # waiting for a real process takes real time
        deadline = clock.monotonic() + _START_SECONDS
        while clock.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"sshd exited at start:\n{self.log_path.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                clock.sleep(0.05)
        raise RuntimeError(f"sshd did not listen within {_START_SECONDS} s")

    def stop(self) -> None:
        """Stop sshd and every session it started."""
        if self._process is None:
            return
        self.kill_sessions()
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
        self._process = None

    def restart(self, *, new_host_key: bool = False) -> None:
        """Stop and start again on the same port, optionally with a freshly generated host key
        (what a reused rental address or a reinstalled machine looks like)."""
        self.stop()
        if new_host_key:
            self.host_public_line = write_ed25519_key(self.host_key_path)
        self.start()

    def session_pids(self) -> list[int]:
        """Every process below the listening sshd: per-connection sshd processes, the login
        shells and whatever they run."""
        if self._process is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name is in parentheses and may contain spaces: split after it.
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
        found: list[int] = []
        pending = [self._process.pid]
        while pending:
            for child in children.get(pending.pop(), []):
                found.append(child)
                pending.append(child)
        return found

    def kill_sessions(self, *, only_sshd: bool = False) -> int:
        """SIGKILL every session of this sshd (a dropped connection, seen from the client);
        the listener keeps running. Returns how many processes were signalled. ``only_sshd``:
        kill only the per-connection sshd processes and leave the commands they ran to notice
        on their own (what a network drop looks like to the remote side)."""
        killed = 0
        for pid in self.session_pids():
            if only_sshd and not _is_sshd(pid):
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        return killed

    def write_authorized_client(self, name: str) -> ClientKey:
        """A new client key that sshd does NOT accept (for the wrong-key test)."""
        return self._new_client_key(name)


def _is_sshd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith("sshd")
    except OSError:
        return False
