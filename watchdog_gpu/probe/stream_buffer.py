"""The per-host buffer between the streaming probe's reader and the tick (pure, thread-safe).

The reader adds rows, aux blocks and health changes; the tick takes what arrived since its last
take without waiting on the host. Rows are condensed into runs as they arrive, exactly as
:func:`~watchdog_gpu.probe.condense.condense_runs` would; a full GPU drops its oldest run (blind
time, never idle). ``docs/probe.md``, "Threads and memory" and "The buffer API".
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from watchdog_gpu.model import GpuSample, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.probe.condense import CONTIGUOUS_GAP
from watchdog_gpu.probe.dmon import MAX_GPU_INDEX

Metrics = tuple[float | None, float | None, float | None, float | None, float | None, float | None]
"""(sm, mem, enc, dec, jpg, ofa) of one dmon row (``None``: printed as ``-``)."""

DEFAULT_CAPACITY = 300  # runs per GPU: five minutes of a GPU that flips verdict every second


class Run:
    """Consecutive streamed rows of one GPU with one verdict (see the module docstring): the
    first and last row's instants, the verdict, the per-metric maximum (``None`` sticky) and
    the number of rows. Instants are epoch seconds (``datetime.fromtimestamp(first, UTC)``, as
    :func:`run_samples` records them). The buffer extends only the open run of the current
    take; a run handed out by :meth:`HostBuffer.take` no longer changes."""

    __slots__ = ("first", "last", "merged", "metrics", "rows", "verdict")

    def __init__(self, at: float, verdict: Verdict, metrics: Metrics) -> None:
        self.first = at
        self.last = at
        self.verdict = verdict
        self.metrics = metrics
        self.rows = 1
        self.merged = metrics  # the last row's metrics object: a repeated line merges nothing

    def __repr__(self) -> str:
        return f"Run({self.first}..{self.last}, {self.verdict.value}, {self.metrics}, {self.rows})"


def _maximum(held: Metrics, row: Metrics) -> Metrics:
    """Per metric the larger value (the first of equal ones, as ``max`` keeps it); ``None``
    once either is ``None``."""
    if held == row:
        return held
    sm, mem, enc, dec, jpg, ofa = (
        None if old is None or new is None else (new if new > old else old)
        for old, new in zip(held, row, strict=True)
    )
    return (sm, mem, enc, dec, jpg, ofa)


_GAP = CONTIGUOUS_GAP.total_seconds()
_EDGE = 1e-5  # seconds: farther from the gap, float error and microsecond rounding cannot matter
_SURELY_CONTIGUOUS = _GAP - _EDGE


def _contiguous(last: float, at: float) -> bool:
    """Whether a row at ``at`` continues a run whose last row was at ``last`` — decided on the
    instants as recorded (``datetime.fromtimestamp``: rounded to the microsecond), as
    ``condense_runs`` decides on them; the float difference is enough away from the limit
    (for instants before the year 2286)."""
    gap = at - last
    if gap < _GAP - _EDGE:
        return True
    if gap > _GAP + _EDGE:
        return False
    return datetime.fromtimestamp(at, UTC) - datetime.fromtimestamp(last, UTC) <= CONTIGUOUS_GAP


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
    """What one take found: runs per GPU (time order), rows dropped by full buffers since the
    previous take, the newest aux reading and the health at the take."""

    runs: Mapping[int, tuple[Run, ...]]
    dropped: int
    aux: AuxReading | None
    health: StreamHealth
    last_row_at: datetime | None = None  # the newest row ever buffered

    @property
    def row_count(self) -> int:
        return sum(run.rows for runs in self.runs.values() for run in runs)


@dataclass(eq=False, slots=True)
class _GpuRuns:
    # Closed since the last take, then the open one. A list: an empty deque holds a 64-slot
    # block (≈ 600 bytes a GPU between ticks), an empty list 56 bytes; the oldest run leaves
    # only when a GPU overflows its capacity.
    runs: list[Run] = field(default_factory=list)
    newest: float = float("-inf")  # the newest row's instant, kept across takes


@dataclass(eq=False, slots=True)
class HostBuffer:
    """One host's runs, aux reading and health (see the module docstring)."""

    health_now: StreamHealth
    capacity: int = DEFAULT_CAPACITY
    _gpus: dict[int, _GpuRuns] = field(default_factory=dict)
    _dropped: int = 0
    _aux: AuxReading | None = None
    _last_row_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")

    def add_row(self, gpu: int, at: float, verdict: Verdict, metrics: Metrics) -> None:
        """One row of ``gpu`` at ``at`` (epoch seconds), judged ``verdict``, with its six
        metrics (the reader shares one tuple among the rows that repeat a line)."""
        self.add_rows(((gpu, at, verdict, metrics),))

    def add_rows(self, rows: Iterable[tuple[int, float, Verdict, Metrics]]) -> None:
        """Rows as :meth:`add_row` takes them, in order, under one acquisition of the lock (a
        read of a host brings a few seconds of rows of every GPU at once)."""
        self.add_grouped((at, ((gpu, verdict, metrics),)) for gpu, at, verdict, metrics in rows)

    def add_grouped(
        self, groups: Iterable[tuple[float, Iterable[tuple[int, Verdict, Metrics]]]]
    ) -> None:
        """:meth:`add_rows` of rows grouped by instant: each group's rows (GPU, verdict,
        metrics), in order, are at its instant (the reader's: one per second of the host)."""
        gpus = self._gpus
        with self._lock:
            last = self._last_row_at  # each row added is the last one
            try:
                for row_at, rows in groups:
                    for gpu, verdict, metrics in rows:
                        state = gpus.get(gpu)
                        if state is None:
                            state = self._new_gpu(gpu)
                        # A row before the newest (the clock stepped back) is at the newest:
                        # see the module docstring.
                        newest = state.newest
                        at = last = state.newest = newest if row_at < newest else row_at
                        runs = state.runs
                        if runs:
                            run = runs[-1]
                            if run.verdict is verdict and (
                                at - run.last < _SURELY_CONTIGUOUS or _contiguous(run.last, at)
                            ):
                                # Every streamed row of a steady GPU ends here: kept inline.
                                run.last = at
                                run.rows += 1
                                if metrics is not run.merged:
                                    run.merged = metrics
                                    run.metrics = _maximum(run.metrics, metrics)
                                continue
                        self._open_run(runs, Run(at, verdict, metrics))
            finally:
                self._last_row_at = last

    def _new_gpu(self, gpu: int) -> _GpuRuns:
        """The runs of a GPU's first row (under the lock)."""
        if not 0 <= gpu <= MAX_GPU_INDEX:
            raise ValueError(f"GPU index out of range: {gpu}")
        state = self._gpus[gpu] = _GpuRuns()
        return state

    def _open_run(self, runs: list[Run], run: Run) -> None:
        """Append a GPU's new run; a full GPU drops its oldest (counted) first."""
        if len(runs) >= self.capacity:
            self._dropped += runs.pop(0).rows
        runs.append(run)

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
            runs: dict[int, tuple[Run, ...]] = {}
            for gpu, state in self._gpus.items():
                if state.runs:
                    runs[gpu] = tuple(state.runs)
                    state.runs = []
            dropped, self._dropped = self._dropped, 0
            last, aux, health = self._last_row_at, self._aux, self.health_now
        newest = None if last is None else datetime.fromtimestamp(last, UTC)
        return StreamRead(runs, dropped, aux, health, newest)


def run_samples(read: StreamRead, *, account: str, instance_id: str) -> tuple[GpuSample, ...]:
    """One continuous ``GpuSample`` per run (``covers_from`` its first row, ``at`` its last:
    what :func:`~watchdog_gpu.probe.condense.condense_runs` makes of the same rows), ordered by
    GPU, then time."""
    return tuple(
        GpuSample(
            account=account,
            instance_id=instance_id,
            at=datetime.fromtimestamp(run.last, UTC),
            gpu_index=gpu,
            verdict=run.verdict,
            source=SampleSource.DMON,
            sm=run.metrics[0],
            mem=run.metrics[1],
            enc=run.metrics[2],
            dec=run.metrics[3],
            jpg=run.metrics[4],
            ofa=run.metrics[5],
            covers_from=datetime.fromtimestamp(run.first, UTC),
        )
        for gpu, runs in sorted(read.runs.items())
        for run in runs
    )
