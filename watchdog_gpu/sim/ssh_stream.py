"""The streaming probe's view of simulated hosts: a dmon row per GPU per second, from the world.

A :class:`watchdog_gpu.probe.runner.StreamSource` on the virtual clock. At each take it renders,
for every second since the last, what the real streaming command would have sent (dated rows in
the host's batches, the aux block every minute) and feeds it to the real
:class:`~watchdog_gpu.probe.stream_reader.StreamReader`. The scenario's ``ssh`` modes print
nothing (blind), garbage, or leave a host to burst mode; a blind second ends the session and
loses the rows the host kept, as a reconnection does (``docs/scenario-format.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.config import Settings
from watchdog_gpu.model import InstanceRef, ProbeStatus
from watchdog_gpu.probe.command import BEGIN_MARKER, END_MARKER, GPUS_MARKER, exit_marker
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.stream_buffer import (
    DEFAULT_CAPACITY,
    HostBuffer,
    ProbeMode,
    StreamHealth,
    StreamRead,
    StreamState,
    starting,
)
from watchdog_gpu.probe.stream_command import StreamCommandSpec
from watchdog_gpu.probe.stream_reader import StreamReader
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.sim.dmon_render import (
    dmon_stamp,
    render_compute_apps,
    render_dmon_header,
    render_dmon_rows,
    render_gpu_list,
)
from watchdog_gpu.sim.gpu import GpuState
from watchdog_gpu.sim.records import UnknownInstanceError
from watchdog_gpu.sim.world import SimulatedWorld

_SECOND = timedelta(seconds=1)
_CATCH_UP = timedelta(days=1)
_COMPUTE_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")
_GARBAGE = "Segmentation fault (core dumped)\n"
_HEADER = render_dmon_header(dated=True)
_BLIND = {
    "down": (ProbeStatus.UNREACHABLE, "timed out"),
    "refused": (ProbeStatus.UNREACHABLE, "connection refused"),
    "hostkey_changed": (ProbeStatus.HOST_KEY_CHANGED, "host key changed"),
    "garbage": (ProbeStatus.UNPARSEABLE, "the stream printed lines that are no dmon rows"),
}


@dataclass
class _Host:
    target: SshTarget
    buffer: HostBuffer
    reader: StreamReader
    read_until: datetime
    next_aux: datetime
    session: bool = False  # a session is streaming (its header was sent)
    kept: list[str] | None = None  # rows the host keeps until the next batch
    seconds_kept: int = 0  # new seconds since the last batch was sent


class SimulatedStreams:
    """Streams of the simulated hosts (thread-safe; the world is too)."""

    def __init__(
        self,
        world: SimulatedWorld,
        *,
        threshold_percent: float = 5.0,
        interactive_recent_seconds: int = 1800,
        aux_interval: timedelta = timedelta(seconds=60),
        burst: Collection[InstanceRef] = (),
        capacity: int = DEFAULT_CAPACITY,
        batch_seconds: int = StreamCommandSpec().batch_seconds,
        keyless: Collection[str] = (),
    ) -> None:
        self.world = world
        self._threshold = threshold_percent
        self._recent = interactive_recent_seconds
        self._aux_interval = aux_interval
        self._burst = frozenset(burst)
        self._keyless = frozenset(keyless)
        self._capacity = capacity
        self._batch = batch_seconds
        self._stamps: dict[datetime, str] = {}  # every host prints the same second's stamp
        self._hosts: dict[InstanceRef, _Host] = {}
        self._rendered: dict[GpuState, str] = {}  # the same state prints the same text
        self._lock = threading.Lock()

    def sync(self, targets: Sequence[SshTarget]) -> None:
        now = self.world.now()
        wanted = {
            target.ref: target
            for target in targets
            if target.ref not in self._burst and target.account not in self._keyless
        }
        with self._lock:
            for ref in [ref for ref in self._hosts if ref not in wanted]:
                del self._hosts[ref]
            for ref, target in wanted.items():
                if ref not in self._hosts:
                    buffer = HostBuffer(starting(now), capacity=self._capacity)
                    reader = StreamReader(
                        buffer, threshold=self._threshold, interactive_recent_seconds=self._recent
                    )
                    self._hosts[ref] = _Host(target, buffer, reader, now, now)

    def take(self, ref: InstanceRef) -> StreamRead | None:
        with self._lock:
            host = self._hosts.get(ref)
        if host is None:
            return None
        now = self.world.now()
        # Every second since the previous take, as a real reader thread reads them while the
        # tick is late (its buffer keeps runs, not seconds: a steady GPU is one run however
        # late); only a take more than a day late starts from a day ago (that much is blind).
        moment = max(host.read_until, now - _CATCH_UP)
        while moment + _SECOND <= now:
            moment += _SECOND
            self._second(host, moment)
        host.read_until = moment
        host.buffer.set_health(self._health(host, now))
        return host.buffer.take()

    def health(self) -> Mapping[InstanceRef, StreamHealth]:
        with self._lock:
            hosts = list(self._hosts.items())
        return {ref: host.buffer.health() for ref, host in hosts}

    def _state(self, host: _Host, at: datetime) -> GpuState | None:
        try:
            return self.world.gpu_state(host.target.account, host.target.instance_id, at)
        except UnknownInstanceError:
            return None

    def _second(self, host: _Host, at: datetime) -> None:
        state = self._state(host, at)
        if state is None or not state.running or state.ssh in _SESSION_ENDING:
            host.session, host.kept = False, None  # the session ends with what the host kept
            return
        if state.ssh == "garbage":
            host.reader.feed_stdout(_GARBAGE, at)
            host.session, host.kept = False, None  # the watchdog replaces such a session
            return
        self._feed_row(host, self._row_text(state, at), at)
        if at >= host.next_aux:
            host.reader.feed_stderr(_aux_block(state, at), at)
            host.next_aux = at + self._aux_interval

    def _row_text(self, state: GpuState, at: datetime) -> str:
        """The dmon rows of ``state`` stamped ``at`` (both parts cached: a fleet repeats them)."""
        rows = self._rendered.get(state)
        if rows is None:
            if len(self._rendered) >= 1024:
                self._rendered.clear()
            rows = self._rendered[state] = render_dmon_rows(state, "\0")
        stamp = self._stamps.get(at)
        if stamp is None:
            if len(self._stamps) >= 64:
                self._stamps.clear()
            stamp = self._stamps[at] = dmon_stamp(at)
        return rows.replace("\0", stamp)

    def _feed_row(self, host: _Host, text: str, at: datetime) -> None:
        """A new session gets the header and its first row at once; later rows are kept and
        flushed every ``batch`` seconds, as a pipe's buffer does."""
        if not host.session or host.kept is None:
            host.session, host.kept, host.seconds_kept = True, [], 0
            host.reader.feed_stdout(_HEADER + text, at)
            return
        host.seconds_kept += 1
        if host.seconds_kept >= self._batch:
            host.reader.feed_stdout("".join(host.kept), at)
            host.kept.clear()
            host.seconds_kept = 0
        host.kept.append(text)

    def _health(self, host: _Host, now: datetime) -> StreamHealth:
        state = self._state(host, now)
        mode = "down" if state is None or not state.running else state.ssh
        if mode in _BLIND:
            status, detail = _BLIND[mode]
            detail = f"{host.target.endpoint}: {detail}"
            return StreamHealth(ProbeMode.STREAM, StreamState.BACKOFF, status, now, detail)
        last_row = host.reader.last_row_at
        if last_row is None:
            return starting(now)
        return StreamHealth(
            ProbeMode.STREAM, StreamState.STREAMING, ProbeStatus.OK, now, last_row_at=last_row
        )


# SSH modes in which no session survives the second.
_SESSION_ENDING = frozenset({"down", "refused", "hostkey_changed"})


def _aux_block(state: GpuState, at: datetime) -> str:
    epoch = int(at.timestamp())
    ttys = [str(epoch - 30)] if state.interactive_login else []
    return "".join(
        (
            f"{BEGIN_MARKER}\n",
            exit_marker("DMON", 0) + "\n",
            render_compute_apps(state, _COMPUTE_FIELDS, header=False, units=False),
            exit_marker("APPS", 0) + "\n",
            render_gpu_list(state),
            f"{GPUS_MARKER}\n",
            f"{epoch}\n",
            "".join(f"{tty}\n" for tty in ttys),
            f"{END_MARKER}\n",
        )
    )


def simulated_streams(
    settings: Settings, world: SimulatedWorld, keyless: Collection[str] = ()
) -> SimulatedStreams | None:
    """The simulated streams for ``settings`` (``None`` with ``[probe] mode = "burst"``); the
    hosts of the ``keyless`` accounts are not streamed (no key to log in with)."""
    if settings.probe.mode != "stream":
        return None
    return SimulatedStreams(
        world, threshold_percent=settings.rules.of(IdleGpuConfig).threshold_percent, keyless=keyless
    )
