"""The paramiko command runner: key login, per-instance host-key pinning, deadlines, reuse.

One kept connection per instance id, each connecting step under its own timeout
(:class:`SshTimeouts`), a local deadline per command, the host key checked against the instance's
pin before anything is sent. Failures raise :class:`ProbeError` with a ``ProbeStatus``; messages
never hold key material. ``docs/probe.md``, "The SSH connection".
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import InstanceRef, ProbeStatus
from watchdog_gpu.probe.channel import read_channel
from watchdog_gpu.probe.command import CommandResult
from watchdog_gpu.probe.hostkeys import HostKeyStore
from watchdog_gpu.probe.paramiko_lean import paramiko
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.sshkeys import fingerprint, prefer_key_type

logger = logging.getLogger(__name__)

# paramiko logs failed banners and negotiations at ERROR with a traceback; each failure here
# becomes a probe outcome with its own text, so its log would be noise in the journal.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)

_CONNECTION_ERRORS = (paramiko.SSHException, EOFError, OSError)
_KEPT_POLL_SECONDS = 1.0  # how long a kept transport's thread waits on its socket at a time


@dataclass(frozen=True, slots=True)
class SshTimeouts:
    """Per-step deadlines in seconds. ``keepalive_seconds`` keeps NAT mappings of kept
    connections alive between probes."""

    connect_seconds: float = 10.0
    banner_seconds: float = 10.0
    handshake_seconds: float = 10.0
    auth_seconds: float = 10.0
    channel_open_seconds: float = 10.0
    keepalive_seconds: int = 30
    max_output_bytes: int = 1 << 20


@dataclass
class _Connection:
    endpoint: str
    transport: paramiko.Transport


def _unreachable(target: SshTarget, what: str) -> ProbeError:
    return ProbeError(f"{target.endpoint}: {what}", status=ProbeStatus.UNREACHABLE.value)


def _let_go(error: BaseException) -> None:
    """Drop the traceback of an error paramiko raised, once caught.

    paramiko re-raises a failure its transport thread saved from a local variable
    (``e = self.get_exception(); raise e`` in ``start_client``, ``open_channel`` and the auth
    handler's ``wait_for_response``), so the error's traceback holds a frame that holds the
    error: a reference cycle per failure, which also keeps our frames alive (and through them
    the caller's), until the cyclic collector runs. We only ever keep its text (the
    :class:`ProbeError` raised from it suppresses it as context), so its traceback can go.
    """
    error.__traceback__ = None


class ParamikoRunner:
    """A :class:`~watchdog_gpu.probe.runner.CommandRunner` over paramiko.

    Given the private keys to offer (see :func:`watchdog_gpu.probe.sshkeys.load_private_keys`),
    optionally the ssh-agent's keys, and the host-key store that pins keys per instance id.
    Thread-safe: different instances run in parallel, one instance's probes run one at a time.
    """

    def __init__(
        self,
        keys: Sequence[paramiko.PKey],
        host_keys: HostKeyStore,
        *,
        use_agent: bool = False,
        timeouts: SshTimeouts | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not keys and not use_agent:
            raise ValueError("ParamikoRunner needs at least one private key or the ssh-agent")
        self._keys = tuple(keys)
        self._host_keys = host_keys
        self._use_agent = use_agent
        self._timeouts = timeouts or SshTimeouts()
        self._clock = clock or SystemClock()
        self._connections: dict[InstanceRef, _Connection] = {}
        self._instance_locks: dict[InstanceRef, threading.Lock] = {}
        self._lock = threading.Lock()
        # Counts close(): a connection that finishes connecting after a close() that began
        # during it is closed, not kept (nothing would close it again).
        self._closes = 0

    # -- the CommandRunner seam ---------------------------------------------------------------

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult:
        """Run ``command`` on ``target`` within ``deadline_seconds`` (after connecting).

        Returns the output; raises :class:`ProbeError` when no command could be started or the
        connection dropped while it ran.
        """
        with self._instance_lock(target.ref):
            connection, reused = self._connection_for(target)
            try:
                channel = self._start(connection.transport, command)
            except _CONNECTION_ERRORS as exc:
                _let_go(exc)
                self._discard(target.ref)
                if not reused:
                    raise _unreachable(target, f"could not start the command: {exc}") from None
                # A kept connection can die quietly between probes (sshd restarted, NAT expiry).
                logger.info("ssh reconnect instance=%s reason=%s", target.ref.key, exc)
                connection = self._connect(target)
                try:
                    channel = self._start(connection.transport, command)
                except _CONNECTION_ERRORS as retry_exc:
                    _let_go(retry_exc)
                    self._discard(target.ref)
                    raise _unreachable(
                        target, f"could not start the command: {retry_exc}"
                    ) from None
            result = read_channel(
                channel, deadline_seconds, self._clock, self._timeouts.max_output_bytes
            )
            dropped = not connection.transport.is_active()
            if result.exit_status is None and not result.timed_out and dropped:
                self._discard(target.ref)
                raise _unreachable(target, "connection dropped while the command ran")
            if result.timed_out:
                # The connection may be black-holed; a fresh one next time costs little.
                self._discard(target.ref)
            return result

    def open_channel(self, target: SshTarget, command: str) -> paramiko.Channel:
        """Start ``command`` on ``target`` over the kept connection (connecting first when there
        is none; one fresh reconnect when the kept one turns out dead) and return its channel,
        for the caller to read (the streaming probe). Raises :class:`ProbeError` like
        :meth:`run` when no command could be started."""
        with self._instance_lock(target.ref):
            connection, reused = self._connection_for(target)
            try:
                return self._start(connection.transport, command)
            except _CONNECTION_ERRORS as exc:
                _let_go(exc)
                self._discard(target.ref)
                if not reused:
                    raise _unreachable(target, f"could not start the command: {exc}") from None
            connection = self._connect(target)
            try:
                return self._start(connection.transport, command)
            except _CONNECTION_ERRORS as exc:
                _let_go(exc)
                self._discard(target.ref)
                raise _unreachable(target, f"could not start the command: {exc}") from None

    # -- kept connections ---------------------------------------------------------------------

    def close_except(self, keep: Collection[InstanceRef]) -> None:
        """Close every kept connection whose instance is not in ``keep``."""
        with self._lock:
            known = set(self._connections) | set(self._instance_locks)
            stale = [ref for ref in known if ref not in keep]
        for ref in stale:
            self.close_instance(ref)

    def close_instance(self, ref: InstanceRef) -> None:
        """Close the kept connection of one instance, if any."""
        self._discard(ref)
        with self._lock:
            lock = self._instance_locks.get(ref)
            # Drop the per-instance lock too (the daemon runs for months), unless a probe holds it.
            if lock is not None and lock.acquire(blocking=False):
                del self._instance_locks[ref]
                lock.release()

    def close(self) -> None:
        """Close every kept connection, and one that is connecting now once it has."""
        with self._lock:
            self._closes += 1
        self.close_except(())

    def kept_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def __enter__(self) -> ParamikoRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _instance_lock(self, ref: InstanceRef) -> threading.Lock:
        with self._lock:
            return self._instance_locks.setdefault(ref, threading.Lock())

    def _discard(self, ref: InstanceRef) -> None:
        with self._lock:
            connection = self._connections.pop(ref, None)
        if connection is not None:
            connection.transport.close()

    def _connection_for(self, target: SshTarget) -> tuple[_Connection, bool]:
        with self._lock:
            kept = self._connections.get(target.ref)
        if kept is not None:
            if kept.endpoint == target.endpoint and kept.transport.is_active():
                return kept, True
            self._discard(target.ref)
        return self._connect(target), False

    # -- connecting ---------------------------------------------------------------------------

    def _connect(self, target: SshTarget) -> _Connection:
        timeouts = self._timeouts
        with self._lock:
            closes = self._closes
        try:
            sock = socket.create_connection(
                (target.host, target.port), timeout=timeouts.connect_seconds
            )
        except OSError as exc:  # refused, no route, DNS failure, connect timeout
            raise _unreachable(target, f"cannot connect: {exc}") from None
        try:
            transport = paramiko.Transport(sock)
        except Exception:
            sock.close()
            raise
        try:
            self._negotiate(target, transport)
            self._check_host_key(target, transport)
            self._authenticate(target, transport)
            self._pin_if_new(target, transport)
        except BaseException:
            transport.close()
            sock.close()  # Transport.close() leaves the socket of a transport that is not active
            raise
        transport.set_keepalive(timeouts.keepalive_seconds)
        # paramiko's transport thread wakes every 0.1 s to check whether it should stop (its
        # socket timeout): most of the streaming probe's CPU at 200 idle connections
        # (bench/README.md, "Streaming probe"). A kept
        # connection needs no such haste — close() closes the socket itself, keepalives are
        # seconds apart — so its thread waits on the socket for up to a second at a time.
        transport.sock.settimeout(_KEPT_POLL_SECONDS)
        connection = _Connection(target.endpoint, transport)
        with self._lock:
            closed = self._closes != closes
            if not closed:
                self._connections[target.ref] = connection
        if closed:
            transport.close()
            sock.close()  # Transport.close() leaves the socket of a transport it never started
            raise _unreachable(target, "the SSH runner was closed while connecting")
        return connection

    def _negotiate(self, target: SshTarget, transport: paramiko.Transport) -> None:
        transport.banner_timeout = self._timeouts.banner_seconds
        transport.handshake_timeout = self._timeouts.handshake_seconds
        transport.auth_timeout = self._timeouts.auth_seconds
        pinned = self._host_keys.get_pinned_host_key(target.account, target.instance_id)
        if pinned is not None:
            # Ask for the pinned key type first, as OpenSSH does for known hosts: a server with
            # several host keys would otherwise look "changed" when it offers another type.
            options = transport.get_security_options()
            options.key_types = prefer_key_type(tuple(options.key_types), pinned[0])
        limit = self._timeouts.banner_seconds + self._timeouts.handshake_seconds
        try:
            transport.start_client(timeout=limit)
        except _CONNECTION_ERRORS as exc:
            _let_go(exc)
            raise _unreachable(target, f"SSH negotiation failed: {exc}") from None
        if not transport.is_active() or transport.host_key is None:
            raise _unreachable(target, f"SSH negotiation did not finish within {limit:g} s")

    def _check_host_key(self, target: SshTarget, transport: paramiko.Transport) -> None:
        server_key = transport.get_remote_server_key()
        pinned = self._host_keys.get_pinned_host_key(target.account, target.instance_id)
        if pinned is None or pinned == (server_key.get_name(), server_key.get_base64()):
            return
        pinned_print = fingerprint(pinned[1])
        offered_print = fingerprint(server_key.get_base64())
        logger.warning(
            "ssh host key changed instance=%s endpoint=%s pinned=%s offered=%s",
            target.ref.key,
            target.endpoint,
            pinned_print,
            offered_print,
        )
        raise ProbeError(
            f"{target.endpoint}: host key changed for instance {target.instance_id}: pinned "
            f"{pinned[0]} {pinned_print}, offered {server_key.get_name()} {offered_print}; "
            "no command was run",
            status=ProbeStatus.HOST_KEY_CHANGED.value,
        )

    def _authenticate(self, target: SshTarget, transport: paramiko.Transport) -> None:
        agent = self._agent()
        try:
            candidates: list[paramiko.PKey] = list(self._keys)
            if agent is not None:
                candidates.extend(agent.get_keys())
            for key in candidates:
                try:
                    transport.auth_publickey(target.user, key)
                except paramiko.BadAuthenticationType as exc:
                    _let_go(exc)
                    break  # the server does not take keys at all
                except paramiko.AuthenticationException as exc:
                    _let_go(exc)
                    continue
                except _CONNECTION_ERRORS as exc:
                    _let_go(exc)
                    raise _unreachable(target, f"connection lost during login: {exc}") from None
                if transport.is_authenticated():
                    return
        finally:
            if agent is not None:
                agent.close()
        raise ProbeError(
            f"{target.endpoint}: the server accepted none of our {len(candidates)} key(s)",
            status=ProbeStatus.AUTH_FAILED.value,
        )

    def _agent(self) -> paramiko.Agent | None:
        if not self._use_agent:
            return None
        try:
            return paramiko.Agent()
        except paramiko.SSHException as exc:
            logger.warning("ssh-agent not usable: %s", exc)
            return None

    def _pin_if_new(self, target: SshTarget, transport: paramiko.Transport) -> None:
        if self._host_keys.get_pinned_host_key(target.account, target.instance_id) is not None:
            return
        server_key = transport.get_remote_server_key()
        self._host_keys.pin_host_key(
            target.account,
            target.instance_id,
            server_key.get_name(),
            server_key.get_base64(),
            self._clock.now(),
        )
        logger.info(
            "ssh host key pinned instance=%s type=%s fingerprint=%s",
            target.ref.key,
            server_key.get_name(),
            fingerprint(server_key.get_base64()),
        )

    # -- running ------------------------------------------------------------------------------

    def _start(self, transport: paramiko.Transport, command: str) -> paramiko.Channel:
        channel = transport.open_session(timeout=self._timeouts.channel_open_seconds)
        try:
            channel.exec_command(command)
        except BaseException:
            channel.close()
            raise
        return channel
