"""Per-sample GPU verdicts: busy, idle or unknown.

The rule (``docs/safety.md``, "Blind time and the idle clock"): a GPU is **busy** in a sample when
any activity metric (``sm``, ``enc``, ``dec``, and ``jpg``/``ofa`` where the driver prints them)
exceeds the threshold; **idle** when all of the printed ones are at or below it; **unknown** when
activity cannot be ruled out. ``mem`` is not an activity metric: a desktop compositor keeps it at
16–32 % on an idle GPU.

Unknown cases: ``sm`` is ``-`` (MIG-enabled GPUs print ``-`` for every utilisation) or absent
(``-s p``); another activity column is ``-``; a negative value. When ``sm`` is unavailable the
compute-apps list decides: processes on that GPU → busy; no processes → still unknown (a process
list never proves idleness); no list → unknown. On a GPU that prints ``sm``, processes do not
count: a notebook that holds a CUDA context while doing nothing is exactly the waste to catch.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.compute_apps import ComputeApp
from watchdog_gpu.probe.dmon import DmonRow, DmonTable

ACTIVITY_METRICS: tuple[str, ...] = ("sm", "enc", "dec", "jpg", "ofa")


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """The combined verdict of every row of one GPU in one parsed output."""

    verdict: Verdict
    samples: int


def check_threshold(threshold: float) -> float:
    """Return ``threshold`` if it is a percentage in [0, 100]; raise ``ValueError`` otherwise."""
    if not (math.isfinite(threshold) and 0 <= threshold <= 100):
        raise ValueError(f"threshold must be a percentage between 0 and 100, got {threshold!r}")
    return threshold


def metrics_verdict(
    metrics: Mapping[str, float | None], *, threshold: float, processes: int | None = None
) -> Verdict:
    """The verdict for one GPU at one instant from its activity metrics.

    ``metrics`` holds the activity columns the tool printed (absent key: column not printed;
    ``None``: printed ``-``). ``processes`` is the number of compute processes known on this GPU
    (``None``: no list). See the module docstring for the rule.
    """
    check_threshold(threshold)
    values = [metrics[name] for name in ACTIVITY_METRICS if name in metrics]
    if _any_above(values, threshold):
        return Verdict.BUSY
    if metrics.get("sm") is None:
        return Verdict.BUSY if processes else Verdict.UNKNOWN
    if _any_unreadable(values):
        return Verdict.UNKNOWN
    return Verdict.IDLE


def _any_above(values: Sequence[float | None], threshold: float) -> bool:
    """Whether a printed value is above ``threshold``."""
    return any(value is not None and value > threshold for value in values)


def _any_unreadable(values: Sequence[float | None]) -> bool:
    """Whether a value was printed as ``-`` or is negative (no reading)."""
    return any(value is None or value < 0 for value in values)


def row_verdict(row: DmonRow, *, threshold: float = 0.0, processes: int | None = None) -> Verdict:
    """The verdict for one dmon row (one GPU, one sampling cycle)."""
    metrics = {name: row.metric(name) for name in ACTIVITY_METRICS if name in row.values}
    return metrics_verdict(metrics, threshold=threshold, processes=processes)


def combine_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    """Busy if any verdict is busy; idle if there is at least one and all are idle; else unknown."""
    seen = list(verdicts)
    if Verdict.BUSY in seen:
        return Verdict.BUSY
    if seen and all(verdict is Verdict.IDLE for verdict in seen):
        return Verdict.IDLE
    return Verdict.UNKNOWN


def processes_per_gpu(
    apps: Sequence[ComputeApp] | None,
    gpu_indices: Sequence[int],
    gpu_ids: Mapping[str, int] | None = None,
) -> dict[int, int] | None:
    """Count the compute processes on each GPU in ``gpu_indices`` (``None`` if no list was read).

    A process is placed by its GPU UUID or bus id through ``gpu_ids`` (from ``parse_gpu_list``).
    One it cannot place (no mapping, unknown id) belongs to the only GPU when there is one, and
    otherwise counts on **every** GPU: wrongly calling a GPU busy costs money, wrongly calling it
    idle can kill a job, so the doubt goes to busy. A process placed on a GPU outside
    ``gpu_indices`` is not counted.
    """
    if apps is None:
        return None
    counts = dict.fromkeys(gpu_indices, 0)
    unplaced = 0
    for app in apps:
        placed = _placed_gpu(app, gpu_ids)
        if placed is not None:
            if placed in counts:
                counts[placed] += 1
        elif len(counts) == 1:
            counts[gpu_indices[0]] += 1
        else:
            unplaced += 1
    return {index: count + unplaced for index, count in counts.items()}


def _placed_gpu(app: ComputeApp, gpu_ids: Mapping[str, int] | None) -> int | None:
    """The GPU index of ``app`` by its GPU UUID, else its bus id (``None``: not placed)."""
    if not gpu_ids:
        return None
    for key in (app.gpu_uuid, app.gpu_bus_id):
        if key is not None and key in gpu_ids:
            return gpu_ids[key]
    return None


def summarise(
    table: DmonTable, *, threshold: float = 0.0, processes: Mapping[int, int] | None = None
) -> dict[int, GpuSummary]:
    """Per GPU index: the combined verdict of its rows and how many rows it has."""
    verdicts: dict[int, list[Verdict]] = {}
    for row in table.rows:
        count = None if processes is None else processes.get(row.gpu)
        verdicts.setdefault(row.gpu, []).append(
            row_verdict(row, threshold=threshold, processes=count)
        )
    return {
        gpu: GpuSummary(combine_verdicts(found), len(found))
        for gpu, found in sorted(verdicts.items())
    }
