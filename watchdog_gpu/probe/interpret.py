"""What one probe's command result means: a status, a detail text, samples and the login flag.

Pure (no I/O, no clock). The order of the checks is the safety argument: every way the output can
be missing, cut, hung or strange ends in a non-OK status with **no samples**, so nothing here can
turn missing data into "idle". Only a dmon run that exited 0 and printed rows yields samples.

- ``timeout``: the local deadline passed, or the remote ``timeout`` fired (exit 124);
- ``unreachable``: the session ended before dmon's part was complete (no exit status);
- ``unparseable``: output over the size limit, no begin marker, dmon part unreadable, a header
  without rows;
- ``driver_error``: an nvidia-smi error text (``DmonError`` kinds), or dmon exited non-zero;
- ``ok``: rows parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import GpuSample, ProbeOutcome, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.probe.command import (
    REMOTE_TIMEOUT_EXIT_STATUS,
    CommandResult,
    ProbeCommandSpec,
    ProbeSections,
    interactive_login,
    split_probe_output,
)
from watchdog_gpu.probe.compute_apps import parse_gpu_list
from watchdog_gpu.probe.samples import read_probe_output

_SNIPPET = 120


@dataclass(frozen=True, slots=True)
class ProbeContext:
    """Everything besides the output that the outcome needs.

    ``at``: the round's instant (the outcome's timestamp); ``started_at``/``read_at``: when the
    command started and when its output was read (samples are anchored between them);
    ``expected_gpus``: the GPU count the provider reported, if any.
    """

    account: str
    instance_id: str
    at: datetime
    started_at: datetime
    read_at: datetime
    duration_seconds: float
    spec: ProbeCommandSpec
    threshold_percent: float
    interactive_recent_seconds: int
    expected_gpus: int | None = None
    deadline_seconds: float | None = None


def failed(context: ProbeContext, status: ProbeStatus, detail: str) -> ProbeOutcome:
    """A non-OK outcome: never carries samples."""
    return ProbeOutcome(
        account=context.account,
        instance_id=context.instance_id,
        at=context.at,
        status=status,
        duration_seconds=context.duration_seconds,
        detail=detail,
    )


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return repr(text[:_SNIPPET] + ("…" if len(text) > _SNIPPET else ""))


def interpret(result: CommandResult, context: ProbeContext) -> ProbeOutcome:
    """Turn the result of the probe command into an outcome (see the module's table)."""
    spec = context.spec
    if result.timed_out:
        deadline = context.deadline_seconds or spec.deadline_seconds
        return failed(
            context, ProbeStatus.TIMEOUT, f"no complete output within the {deadline:g} s deadline"
        )
    if result.output_truncated:
        return failed(context, ProbeStatus.UNPARSEABLE, "output exceeded the size limit")
    sections = split_probe_output(result.stdout)
    if sections is None or sections.dmon_exit is None:
        if result.exit_status is None:
            return failed(context, ProbeStatus.UNREACHABLE, "the session ended mid-command")
        where = "did not start" if sections is None else "output was cut short"
        return failed(
            context,
            ProbeStatus.UNPARSEABLE,
            f"the probe command {where} (exit {result.exit_status}): "
            f"{_snippet(result.stdout + result.stderr)}",
        )
    if sections.dmon_exit == REMOTE_TIMEOUT_EXIT_STATUS:
        return failed(
            context,
            ProbeStatus.TIMEOUT,
            f"nvidia-smi dmon did not finish within {spec.dmon_timeout_seconds} s on the host",
        )
    return _read(sections, context)


def _read(sections: ProbeSections, context: ProbeContext) -> ProbeOutcome:
    apps_text = sections.apps_text if sections.apps_exit == 0 else None
    try:
        gpu_ids: Mapping[str, int] | None = parse_gpu_list(sections.gpus_text)
    except DmonError:
        gpu_ids = None  # without the map, processes count on every GPU (the safe side)
    try:
        reading = read_probe_output(
            sections.dmon_text,
            apps_text,
            account=context.account,
            instance_id=context.instance_id,
            read_at=context.read_at,
            interval=timedelta(seconds=context.spec.interval_seconds),
            threshold=context.threshold_percent,
            started_at=context.started_at,
            gpu_ids=gpu_ids,
        )
    except DmonError as error:
        if error.kind == "unparseable":
            return failed(context, ProbeStatus.UNPARSEABLE, f"dmon output: {error}")
        return failed(context, ProbeStatus.DRIVER_ERROR, f"{error.kind}: {error}")
    if sections.dmon_exit != 0:
        return failed(
            context,
            ProbeStatus.DRIVER_ERROR,
            f"nvidia-smi dmon exited with status {sections.dmon_exit}",
        )
    if not reading.samples:
        return failed(context, ProbeStatus.UNPARSEABLE, "dmon printed a header but no samples")
    samples = reading.samples + _missing_gpus(reading.samples, context)
    notes = list(reading.notes)
    if len(samples) > len(reading.samples):
        notes.append(f"the provider reports {context.expected_gpus} GPUs; unseen ones are unknown")
    return ProbeOutcome(
        account=context.account,
        instance_id=context.instance_id,
        at=context.at,
        status=ProbeStatus.OK,
        duration_seconds=context.duration_seconds,
        detail=_summary(samples, notes),
        samples=samples,
        interactive_login=interactive_login(sections, context.interactive_recent_seconds),
    )


def _missing_gpus(samples: tuple[GpuSample, ...], context: ProbeContext) -> tuple[GpuSample, ...]:
    """UNKNOWN samples for GPUs the provider says exist but dmon did not show (drivers <= 535
    monitor only 4 GPUs by default): an unseen GPU must never let the instance look idle."""
    if context.expected_gpus is None:
        return ()
    seen = {sample.gpu_index for sample in samples}
    instants = sorted({sample.at for sample in samples})
    return tuple(
        GpuSample(
            account=context.account,
            instance_id=context.instance_id,
            at=at,
            gpu_index=index,
            verdict=Verdict.UNKNOWN,
            source=SampleSource.DMON,
        )
        for index in range(context.expected_gpus)
        if index not in seen
        for at in instants
    )


def _summary(samples: tuple[GpuSample, ...], notes: list[str]) -> str:
    by_verdict: dict[Verdict, set[int]] = {}
    for sample in samples:
        by_verdict.setdefault(sample.verdict, set()).add(sample.gpu_index)
    gpus = len({sample.gpu_index for sample in samples})
    parts = [f"{len(samples)} samples of {gpus} GPU(s)"]
    parts += [
        f"{verdict.value}: {','.join(str(index) for index in sorted(by_verdict[verdict]))}"
        for verdict in Verdict
        if verdict in by_verdict
    ]
    text = "; ".join(parts)
    return f"{text} ({'; '.join(notes)})" if notes else text
