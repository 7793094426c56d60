"""The streaming probe: one long-lived ``nvidia-smi dmon`` session per host, read by one thread.

:class:`StreamManager` implements :class:`~watchdog_gpu.probe.runner.StreamSource` over paramiko:
one reader thread over every session's channel, a few connector threads for the blocking
connects, and reconnects with backoff when a stream stops, stalls or prints garbage (the gap is
blind time, never idle). A host that cannot keep a session falls back to burst mode for a while.
The tick never waits: :meth:`StreamManager.take` only empties a buffer. ``docs/probe.md``,
"Health, reconnects and blind time" and "Threads and memory".
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import queue
import random
import selectors
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from watchdog_gpu.clock import Clock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import InstanceRef, ProbeStatus
from watchdog_gpu.probe.paramiko_lean import paramiko
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.state_log import StateChangeLog
from watchdog_gpu.probe.stream_buffer import (
    DEFAULT_CAPACITY,
    HostBuffer,
    ProbeMode,
    StreamHealth,
    StreamRead,
    StreamState,
    starting,
)
from watchdog_gpu.probe.stream_command import StreamCommandSpec, build_stream_command
from watchdog_gpu.probe.stream_reader import StreamReader

logger = logging.getLogger(__name__)

_TICK_SECONDS = 0.25
START_ALLOWANCE = 30.0  # seconds a new session may take to print its first row
_READ_BYTES = 65536


class ChannelOpener(Protocol):
    """Opens a session running ``command`` on ``target`` (raises ``ProbeError``)."""

    def open_channel(self, target: SshTarget, command: str) -> paramiko.Channel: ...


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The streaming probe's knobs (see the module docstring)."""

    stall_after: timedelta = timedelta(seconds=10)
    garbage_lines: int = 20
    max_backoff: timedelta = timedelta(seconds=60)
    fallback_after: int = 3
    burst_period: timedelta = timedelta(minutes=30)
    connectors: int = 4
    capacity: int = DEFAULT_CAPACITY
    threshold_percent: float = 5.0
    interactive_recent_seconds: int = 1800
    command: StreamCommandSpec = field(default_factory=StreamCommandSpec)


@dataclass(frozen=True, slots=True)
class _Refused:
    """A session that could not be opened: what the host's health shows, without the
    exception (see :meth:`StreamManager._connect`)."""

    status: ProbeStatus
    detail: str


@dataclass(eq=False)
class _Host:
    target: SshTarget
    buffer: HostBuffer
    reader: StreamReader | None = None
    channel: paramiko.Channel | None = None
    stdout: Any = None  # incremental UTF-8 decoders of the open session
    stderr: Any = None
    opened_at: float = 0.0
    last_data: float = (
        0.0  # when dmon's stdout last brought anything (the aux block does not count)
    )
    attempts: int = 0
    rowless_sessions: int = 0
    next_attempt: float = 0.0
    connecting: bool = False
    burst_until: float | None = None
    removed: bool = False


class StreamManager:
    """Streams of every probed host (see the module docstring). Thread-safe."""

    def __init__(
        self,
        opener: ChannelOpener,
        *,
        clock: Clock,
        settings: StreamSettings | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._opener = opener
        self._clock = clock
        self._settings = settings or StreamSettings()
        self._command = build_stream_command(self._settings.command)
        # A healthy host is silent for up to this long between two packets of rows.
        self._quiet = float(self._settings.command.batch_seconds + 1)
        self._rng = rng
        self._state_log = StateChangeLog(logger, what="probe stream")
        self._hosts: dict[InstanceRef, _Host] = {}
        self._lock = threading.Lock()
        self._opened: queue.SimpleQueue[tuple[_Host, paramiko.Channel | _Refused]] = (
            queue.SimpleQueue()
        )
        self._selector = selectors.DefaultSelector()
        self._connectors = ThreadPoolExecutor(
            max_workers=self._settings.connectors, thread_name_prefix="probe-connect"
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="probe-stream", daemon=True)
        self._thread.start()

    @property
    def command(self) -> str:
        """The exact remote command every stream runs."""
        return self._command

    # -- the StreamSource seam ----------------------------------------------------------------

    def sync(self, targets: Sequence[SshTarget]) -> None:
        wanted = {target.ref: target for target in targets}
        now = self._clock.now()
        with self._lock:
            for ref, host in list(self._hosts.items()):
                if ref not in wanted or wanted[ref].endpoint != host.target.endpoint:
                    host.removed = True  # the reader thread closes its session
                    del self._hosts[ref]
            for ref, target in wanted.items():
                if ref not in self._hosts:
                    buffer = HostBuffer(starting(now), capacity=self._settings.capacity)
                    self._hosts[ref] = _Host(target, buffer)

    def take(self, ref: InstanceRef) -> StreamRead | None:
        with self._lock:
            host = self._hosts.get(ref)
        if host is None or host.burst_until is not None:
            return None
        return host.buffer.take()

    def health(self) -> Mapping[InstanceRef, StreamHealth]:
        with self._lock:
            hosts = list(self._hosts.items())
        return {ref: host.buffer.health() for ref, host in hosts}

    def threads(self) -> int:
        """Threads of this manager: the reader plus the connectors started so far."""
        return 1 + len(getattr(self._connectors, "_threads", ()))

    def close(self) -> None:
        """Stop the reader thread and close every session, and any a connector opens after."""
        with self._lock:  # a connector that opens a session after this closes it itself
            self._stop.set()
        self._thread.join(timeout=5)
        self._connectors.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            hosts = list(self._hosts.values())
            self._hosts.clear()
        for host in hosts:
            self._close_session(host)
        while True:  # opened before the stop, never taken by the reader thread
            try:
                _host, result = self._opened.get_nowait()
            except queue.Empty:
                break
            if not isinstance(result, _Refused):
                result.close()
        self._selector.close()

    def __enter__(self) -> StreamManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the reader thread --------------------------------------------------------------------

    def _loop(self) -> None:
        next_check = 0.0
        while not self._stop.is_set():
            try:
                if self._selector.get_map():
                    events = self._selector.select(timeout=_TICK_SECONDS)
                else:
                    self._stop.wait(_TICK_SECONDS)
                    events = []
                for key, _mask in events:
                    self._read(key.data)
                now = self._clock.monotonic()
                self._register_opened(now)
                if now >= next_check:
                    next_check = now + _TICK_SECONDS
                    self._check_all(now)
            except Exception:  # a bug must cost a quarter second, not every stream
                logger.exception("probe stream loop failed")
                self._stop.wait(_TICK_SECONDS)

    def _read(self, host: _Host) -> None:
        channel, reader = host.channel, host.reader
        if channel is None or reader is None:
            return
        at = self._clock.now()
        got = False
        while channel.recv_ready():
            reader.feed_stdout(host.stdout.decode(channel.recv(_READ_BYTES)), at)
            got = True
        while channel.recv_stderr_ready():
            reader.feed_stderr(host.stderr.decode(channel.recv_stderr(_READ_BYTES)), at)
        if got:  # only dmon's side proves the rows flow: a stalled dmon's aux loop goes on
            host.last_data = self._clock.monotonic()
        if channel.eof_received or channel.closed:
            self._end(host, self._end_reason(host), ProbeStatus.UNREACHABLE)

    def _register_opened(self, now: float) -> None:
        while True:
            try:
                host, result = self._opened.get_nowait()
            except queue.Empty:
                return
            host.connecting = False
            if isinstance(result, _Refused):
                self._failed(host, result.status, result.detail, now)
                continue
            if host.removed:
                result.close()
                continue
            host.channel = result
            host.stdout = codecs.getincrementaldecoder("utf-8")(errors="replace")
            host.stderr = codecs.getincrementaldecoder("utf-8")(errors="replace")
            host.reader = StreamReader(
                host.buffer,
                threshold=self._settings.threshold_percent,
                interactive_recent_seconds=self._settings.interactive_recent_seconds,
            )
            host.opened_at = host.last_data = now
            result.setblocking(False)
            self._selector.register(result, selectors.EVENT_READ, host)
            self._set(host, StreamState.CONNECTING, ProbeStatus.OK, "session open, no row yet")

    def _check_all(self, now: float) -> None:
        with self._lock:
            current = set(self._hosts.values())
        for host in list(self._registered()) + [h for h in current if h.channel is None]:
            if host.removed or host not in current:
                self._close_session(host)
                continue
            if host.channel is not None:
                self._check_session(host, now)
            else:
                self._check_without_session(host, now)

    def _check_without_session(self, host: _Host, now: float) -> None:
        """A host between sessions: its stream is retried once its burst time is over, and a
        connection is attempted once it is due."""
        if host.burst_until is not None:
            if now >= host.burst_until:
                host.burst_until = None
                host.rowless_sessions = 0
                logger.info("probe stream retried instance=%s", host.target.ref.key)
        elif not host.connecting and now >= host.next_attempt:
            host.connecting = True
            self._connectors.submit(self._connect, host)

    def _registered(self) -> list[_Host]:
        return [key.data for key in self._selector.get_map().values()]

    def _check_session(self, host: _Host, now: float) -> None:
        reader = host.reader
        assert reader is not None
        settings = self._settings
        if reader.error is not None:
            self._end(host, f"nvidia-smi: {reader.error}", ProbeStatus.DRIVER_ERROR)
        elif reader.garbage >= settings.garbage_lines:
            self._end(
                host, f"{reader.garbage} lines that are no dmon rows", ProbeStatus.UNPARSEABLE
            )
        elif now - host.last_data > (limit := self._stall_limit(host)):
            self._end(host, f"no output for {limit:g} s", ProbeStatus.TIMEOUT)
        elif (
            reader.rows
            and now - host.last_data > settings.stall_after.total_seconds() / 2 + self._quiet
        ):
            self._set(host, StreamState.STALLED, ProbeStatus.TIMEOUT, "rows stopped")
        elif reader.rows and (
            host.attempts or host.buffer.health().state is not StreamState.STREAMING
        ):
            host.attempts = 0
            host.rowless_sessions = 0
            self._set(host, StreamState.STREAMING, ProbeStatus.OK, "")

    def _stall_limit(self, host: _Host) -> float:
        """``stall_after`` beyond the quiet time between two batches; before a session's first
        row, at least :data:`START_ALLOWANCE` (a loaded host may take a while to start the shell
        and nvidia-smi). The aux block and dmon's header come at once and prove nothing about
        the rows: dmon initialising NVML on a busy host may print its first row seconds later
        (the host sends that row at once, not with the next batch)."""
        limit = self._settings.stall_after.total_seconds()
        if host.reader is None or host.reader.rows == 0:
            return max(limit, START_ALLOWANCE)
        return limit + self._quiet

    # -- sessions -----------------------------------------------------------------------------

    def _connect(self, host: _Host) -> None:
        """On a connector thread: open the session (blocking), hand it to the reader thread.

        A failure travels as a :class:`_Refused` (its status and text), never as the exception:
        the exception's traceback holds this frame, which would hold the exception — a
        reference cycle per failed connection, freed only by the cyclic collector (a long
        outage of many hosts would fill its old generation)."""
        try:
            result: paramiko.Channel | _Refused = self._opener.open_channel(
                host.target, self._command
            )
        except ProbeError as error:
            result = _Refused(_status(error.status), str(error))
        except Exception as error:  # a bug must cost one attempt, not the stream
            logger.exception("probe stream connect failed instance=%s", host.target.ref.key)
            result = _Refused(ProbeStatus.UNREACHABLE, f"unexpected {type(error).__name__}")
        with self._lock:
            if not self._stop.is_set():
                self._opened.put((host, result))
                return
        if not isinstance(result, _Refused):
            result.close()  # opened after close(): nobody would ever read or close it

    def _end(self, host: _Host, reason: str, status: ProbeStatus) -> None:
        reader = host.reader
        rows = reader.rows if reader is not None else 0
        lasted = self._clock.monotonic() - host.opened_at
        quick = lasted < self._settings.stall_after.total_seconds()
        self._close_session(host)
        if rows == 0 and status in (ProbeStatus.UNREACHABLE, ProbeStatus.UNPARSEABLE) and quick:
            host.rowless_sessions += 1  # the session ended by itself before any row
        else:
            host.rowless_sessions = 0
        if host.rowless_sessions >= self._settings.fallback_after:
            host.burst_until = self._clock.monotonic() + self._settings.burst_period.total_seconds()
            host.buffer.set_health(
                StreamHealth(
                    ProbeMode.BURST,
                    StreamState.STOPPED,
                    ProbeStatus.OK,
                    self._clock.now(),
                    f"streaming ended {host.rowless_sessions} times without a row ({reason})",
                )
            )
            logger.warning(
                "probe stream falls back to burst mode instance=%s reason=%s",
                host.target.ref.key,
                reason,
            )
            return
        self._failed(host, status, reason, self._clock.monotonic())

    def _failed(self, host: _Host, status: ProbeStatus, detail: str, now: float) -> None:
        host.attempts += 1
        delay = min(self._settings.max_backoff.total_seconds(), 2.0 ** (host.attempts - 1))
        host.next_attempt = now + delay * (0.8 + 0.4 * self._rng())
        self._set(host, StreamState.BACKOFF, status, detail)

    def _close_session(self, host: _Host) -> None:
        channel, host.channel, host.reader = host.channel, None, None
        if channel is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(channel)
        channel.close()  # the remote side sees EOF on stdin and kills the probe's processes

    def _end_reason(self, host: _Host) -> str:
        reader = host.reader
        if reader is not None and reader.dmon_exit is not None:
            return f"nvidia-smi dmon exited with status {reader.dmon_exit}"
        channel = host.channel
        transport = channel.get_transport() if channel is not None else None
        if transport is None or not transport.is_active():
            return "the connection dropped"
        return "the session ended"

    def _set(self, host: _Host, state: StreamState, status: ProbeStatus, detail: str) -> None:
        before = host.buffer.health()
        if (before.state, before.status, before.detail) == (state, status, detail):
            return
        reader = host.reader
        last_row = reader.last_row_at if reader is not None else before.last_row_at
        host.buffer.set_health(
            StreamHealth(
                ProbeMode.STREAM,
                state,
                status,
                self._clock.now(),
                detail,
                host.attempts,
                last_row,
            )
        )
        self._state_log.note(
            host.target.ref.key,
            "ok" if status is ProbeStatus.OK else f"{state.value}:{status.value}",
            self._clock.monotonic(),
            "probe stream instance=%s account=%s state=%s status=%s detail=%s",
            host.target.ref.key,
            host.target.ref.account,
            state.value,
            status.value,
            detail,
        )


def _status(value: str) -> ProbeStatus:
    try:
        status = ProbeStatus(value)
    except ValueError:
        return ProbeStatus.UNREACHABLE
    return ProbeStatus.UNREACHABLE if status is ProbeStatus.OK else status
