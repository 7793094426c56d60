"""Condensing probe rows into a few samples per GPU before they are recorded.

A run of one GPU's consecutive rows with one verdict becomes one sample: the maximum of each
metric (``None`` sticky, so an unreadable row is never averaged into idle). Burst rows become
*point* samples; streamed rows *continuous* ones (``covers_from``), so the idle onset is exact
and holes stay blind. :func:`fold_before_last_busy` folds what can no longer move the idle clock.
``docs/probe.md``, "Burst mode" and "Bursty GPUs". Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import timedelta

from watchdog_gpu.model import GpuSample, Verdict
from watchdog_gpu.probe.verdicts import combine_verdicts

_METRICS = ("sm", "mem", "enc", "dec", "jpg", "ofa")

CONTIGUOUS_GAP = timedelta(seconds=2)
"""Two streamed rows of a GPU at most this far apart observe the time between them: one dmon
interval (1 s) plus a second of jitter or one lost row. A longer gap is blind time."""


def condense_samples(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """One point sample per run of one verdict per (source, GPU) (``docs/probe.md``, "Burst mode");
    ordered by source, GPU and time. Continuous samples (``covers_from`` set, already condensed
    by :func:`condense_runs`) are kept as they are, after the others."""
    groups: dict[tuple[str, int], list[GpuSample]] = {}
    runs: list[GpuSample] = []
    for sample in samples:
        if sample.covers_from is not None:
            runs.append(sample)
        else:
            groups.setdefault((sample.source.value, sample.gpu_index), []).append(sample)
    points = [
        _point(run)
        for _key, group in sorted(groups.items())
        for run in _verdict_runs(sorted(group, key=lambda row: row.at))
    ]
    return (*points, *runs)


def _verdict_runs(rows: Sequence[GpuSample]) -> list[list[GpuSample]]:
    runs: list[list[GpuSample]] = []
    for row in rows:
        if runs and runs[-1][-1].verdict is row.verdict:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def _point(run: list[GpuSample]) -> GpuSample:
    condensed = _condense(run)
    if condensed.verdict is Verdict.IDLE:
        return replace(condensed, at=run[0].at)
    return condensed


def condense_runs(rows: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """One continuous sample per run of streamed rows (see the module docstring), ordered by
    GPU, then time. ``rows`` are per-row samples of one instance, in any order."""
    by_gpu: dict[tuple[str, int], list[GpuSample]] = {}
    for row in rows:
        by_gpu.setdefault((row.source.value, row.gpu_index), []).append(row)
    condensed: list[GpuSample] = []
    for _key, own in sorted(by_gpu.items()):
        own.sort(key=lambda row: row.at)
        run: list[GpuSample] = []
        for row in own:
            if run and (row.verdict is not run[-1].verdict or row.at - run[-1].at > CONTIGUOUS_GAP):
                condensed.append(_run(run))
                run = []
            run.append(row)
        if run:
            condensed.append(_run(run))
    return tuple(condensed)


def fold_before_last_busy(samples: Sequence[GpuSample]) -> tuple[GpuSample, ...]:
    """``samples`` (one take's continuous samples of one instance, by GPU then time, as
    ``stream_buffer.run_samples`` makes them) with each GPU's last busy run folded together
    with the runs before it that are contiguous with it and busy or idle (``docs/probe.md``,
    "Bursty GPUs"). The rules decide the same on the result: the last activity is the busy run's
    ``at``, and what follows it is kept; a folded sample is busy under any threshold its busy
    run was busy under (its maxima are at least that run's; a missing ``sm`` stays missing).
    Under a threshold raised after recording, the activity is the folded sample's ``at``, never
    earlier than the unfolded samples' (the idle clock starts later, never earlier)."""
    folded: list[GpuSample] = []
    start = 0
    for end in range(1, len(samples) + 1):
        if end == len(samples) or samples[end].gpu_index != samples[start].gpu_index:
            folded.extend(_fold_gpu(samples[start:end]))
            start = end
    return tuple(folded)


def _fold_gpu(runs: Sequence[GpuSample]) -> Sequence[GpuSample]:
    """One GPU's runs in time order, the last busy one folded with its stretch (see above)."""
    last = len(runs) - 1
    while last >= 0 and runs[last].verdict is not Verdict.BUSY:
        last -= 1
    if last < 0:
        return runs
    first = last
    while first > 0:
        before, after = runs[first - 1], runs[first]
        if before.verdict is Verdict.UNKNOWN or before.covers_from is None:
            break
        if after.covers_from is None or after.covers_from - before.at > CONTIGUOUS_GAP:
            break  # a blind hole: what lies before it is kept as it was observed
        first -= 1
    if first == last:
        return runs
    stretch = list(runs[first : last + 1])
    one = replace(_condense(stretch), covers_from=stretch[0].covers_from)
    return [*runs[:first], one, *runs[last + 1 :]]


def _run(rows: Sequence[GpuSample]) -> GpuSample:
    first = rows[0].covers_from or rows[0].at
    return replace(_condense(list(rows)), covers_from=first)


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
