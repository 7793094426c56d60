"""The per-host buffer between the streaming probe's reader and the tick (pure, thread-safe).

The reader thread appends each dmon row as it arrives (:meth:`HostBuffer.add_row`), each aux
block (:meth:`HostBuffer.add_aux`) and every change of the stream's health
(:meth:`HostBuffer.set_health`); the tick takes everything that arrived since its previous take
(:meth:`HostBuffer.take`) without waiting on the host.

The API is deliberately small (the compact per-GPU state of the fleet builds on it):

- rows are kept **per GPU** in a ring of ``capacity`` rows (the oldest are dropped: a tick that
  comes very late loses rows, which is blind time, never idle), each row a compact tuple
  :data:`Row` — the instant as epoch seconds, the verdict judged at arrival, the six metrics;
- :meth:`HostBuffer.take` returns a :class:`StreamRead` — the rows per GPU in arrival order, how
  many were dropped, the newest aux reading, and the health — and empties the rings;
- :meth:`HostBuffer.health` reads the health without taking anything (``status``, metrics).

Memory: a row is one tuple of eight fields and its instant (~130 bytes; the reader lets rows that
repeat a line share its metric values); a host with two GPUs read every minute holds ~120 rows
(~16 KiB), at most ``2 × capacity`` (~78 KiB; see ``bench/README.md``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from watchdog_gpu.model import GpuSample, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.probe.dmon import MAX_GPU_INDEX

Row = tuple[
    float,
    Verdict,
    float | None,
    float | None,
    float | None,
    float | None,
    float | None,
    float | None,
]
"""(epoch seconds, verdict, sm, mem, enc, dec, jpg, ofa) of one streamed dmon row."""

DEFAULT_CAPACITY = 300  # rows per GPU: five minutes at one row a second


class ProbeMode(StrEnum):
    """How a host is probed: a long-lived dmon stream, or the burst command each interval."""

    STREAM = "stream"
    BURST = "burst"


class StreamState(StrEnum):
    CONNECTING = "connecting"  # opening the connection or the session
    STREAMING = "streaming"  # rows arrive
    STALLED = "stalled"  # the session is open but rows stopped
    BACKOFF = "backoff"  # the last session failed; the next attempt waits
    STOPPED = "stopped"  # closed on purpose


@dataclass(frozen=True, slots=True)
class StreamHealth:
    """Where a host's stream stands. ``status`` is what a tick without rows reports (a
    ``ProbeStatus``: ``ok`` while streaming); ``since`` when this state began; ``detail`` a
    human sentence (never a secret); ``attempts`` failed sessions in a row."""

    mode: ProbeMode
    state: StreamState
    status: ProbeStatus
    since: datetime
    detail: str = ""
    attempts: int = 0
    last_row_at: datetime | None = None


def starting(at: datetime) -> StreamHealth:
    """The health of a stream that was just asked for: no row yet, so a round reports it
    unreachable (blind), never idle."""
    return StreamHealth(
        ProbeMode.STREAM,
        StreamState.CONNECTING,
        ProbeStatus.UNREACHABLE,
        at,
        "the stream is starting",
    )


@dataclass(frozen=True, slots=True)
class AuxReading:
    """What the newest aux block said: compute processes per GPU index (``None``: no list),
    whether someone typed into a terminal recently (``None``: unknown), when it was read."""

    at: datetime
    processes: Mapping[int, int] | None
    interactive_login: bool | None


@dataclass(frozen=True, slots=True)
class StreamRead:
    """What one take found: rows per GPU (arrival order), rows dropped by full rings since the
    previous take, the newest aux reading and the health at the take."""

    rows: Mapping[int, tuple[Row, ...]]
    dropped: int
    aux: AuxReading | None
    health: StreamHealth
    last_row_at: float | None = None  # epoch seconds of the newest row ever buffered

    @property
    def row_count(self) -> int:
        return sum(len(rows) for rows in self.rows.values())


@dataclass
class HostBuffer:
    """One host's rings, aux reading and health (see the module docstring)."""

    health_now: StreamHealth
    capacity: int = DEFAULT_CAPACITY
    _rows: dict[int, deque[Row]] = field(default_factory=dict)
    _dropped: int = 0
    _aux: AuxReading | None = None
    _last_row_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_row(self, gpu: int, row: Row) -> None:
        if not 0 <= gpu <= MAX_GPU_INDEX:
            raise ValueError(f"GPU index out of range: {gpu}")
        with self._lock:
            ring = self._rows.get(gpu)
            if ring is None:
                ring = self._rows[gpu] = deque(maxlen=self.capacity)
            if len(ring) == self.capacity:
                self._dropped += 1
            ring.append(row)
            self._last_row_at = row[0]

    def add_aux(self, aux: AuxReading) -> None:
        with self._lock:
            self._aux = aux

    def aux(self) -> AuxReading | None:
        with self._lock:
            return self._aux

    def set_health(self, health: StreamHealth) -> None:
        with self._lock:
            self.health_now = health

    def health(self) -> StreamHealth:
        with self._lock:
            return self.health_now

    def take(self) -> StreamRead:
        with self._lock:
            rows = {gpu: tuple(ring) for gpu, ring in self._rows.items() if ring}
            for ring in self._rows.values():
                ring.clear()
            dropped, self._dropped = self._dropped, 0
            return StreamRead(rows, dropped, self._aux, self.health_now, self._last_row_at)


def row_samples(read: StreamRead, *, account: str, instance_id: str) -> list[GpuSample]:
    """One ``GpuSample`` per buffered row (to be condensed into runs before recording)."""
    samples: list[GpuSample] = []
    for gpu, rows in sorted(read.rows.items()):
        for at, verdict, sm, mem, enc, dec, jpg, ofa in rows:
            samples.append(
                GpuSample(
                    account=account,
                    instance_id=instance_id,
                    at=datetime.fromtimestamp(at, UTC),
                    gpu_index=gpu,
                    verdict=verdict,
                    source=SampleSource.DMON,
                    sm=sm,
                    mem=mem,
                    enc=enc,
                    dec=dec,
                    jpg=jpg,
                    ofa=ofa,
                )
            )
    return samples
