"""Condensing one probe's samples to one sample per GPU before they are recorded.

A probe reads N dmon rows per GPU a second apart (see ``probe/command.py``); the rules decide on
minutes. Recording every row would cost N rows per GPU per minute — for a large fleet hundreds of
millions of rows a week — and reading them back would dominate every tick. So each GPU's rows of
one probe become one sample, at the time of the GPU's last row, that keeps what matters for
safety:

- every metric is the **maximum** over the rows, so a single busy second stays busy;
- a metric that any row printed as ``-`` (None) stays None, so an unreadable row can never be
  averaged away into "idle" (the rules then keep the recorded verdict, see below);
- the verdict is busy if any row was busy, idle only if every row was idle, unknown otherwise.

Coverage is unchanged in substance: samples are still ``probe_interval`` apart, below the idle
rule's ``max_sample_gap``. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from watchdog_gpu.model import GpuSample
from watchdog_gpu.probe.verdicts import combine_verdicts

_METRICS = ("sm", "mem", "enc", "dec", "jpg", "ofa")


def condense_samples(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """One sample per (source, GPU): maxima, None kept, verdicts combined; ordered by GPU."""
    groups: dict[tuple[str, int], list[GpuSample]] = {}
    for sample in samples:
        groups.setdefault((sample.source.value, sample.gpu_index), []).append(sample)
    return tuple(_condense(group) for _, group in sorted(groups.items()))


def _condense(group: list[GpuSample]) -> GpuSample:
    last = max(group, key=lambda sample: sample.at)
    values: dict[str, float | None] = {}
    for name in _METRICS:
        readings = [getattr(sample, name) for sample in group]
        values[name] = None if any(r is None for r in readings) else max(readings)
    return replace(
        last,
        verdict=combine_verdicts(sample.verdict for sample in group),
        sm=values["sm"],
        mem=values["mem"],
        enc=values["enc"],
        dec=values["dec"],
        jpg=values["jpg"],
        ofa=values["ofa"],
    )
