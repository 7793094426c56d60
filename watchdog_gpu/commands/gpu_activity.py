"""What the recorded GPU samples say about an instance right now, for ``watchdog-gpu status``.

A summary for people, not a decision: what the latest samples show, and since when the GPUs are
idle as the idle rule's clock counts it (:func:`watchdog_gpu.rules.idle_clock.current_idle`, the
one definition of "idle since" — never re-derived here). Unknown is not idle here either: a GPU
whose latest sample is unknown makes the instance ``unknown``. Neither is an unreachable GPU
busy: when the latest probe failed (SSH down, timed out, unreadable output), what the GPUs do now
is unknown, whatever the older samples said (they are shown as "last seen").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from watchdog_gpu.commands.common import json_time
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState, ProbeOutcome, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.notify.render import format_duration
from watchdog_gpu.probe.verdicts import combine_verdicts
from watchdog_gpu.rules.idle_clock import IdleClockSettings, current_idle
from watchdog_gpu.sample_history import instant, sample_history


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """``status``: busy, idle, unknown, no_samples or not_running. ``idle_since`` is the idle
    rule's clock (:func:`~watchdog_gpu.rules.idle_clock.current_idle`), ``idle_for`` the time
    from it to ``now``; ``idle_at_least`` is true when the clock starts at arming or at the
    view's first sample, not at seen activity (the GPUs may have been idle longer)."""

    status: str
    idle_since: datetime | None = None
    idle_for: timedelta | None = None
    idle_at_least: bool = False
    last_sample_at: datetime | None = None
    last_busy_at: datetime | None = None
    last_probe_status: str | None = None
    last_probe_at: datetime | None = None
    last_seen: str | None = None  # what the samples said before the probe started failing
    probe_mode: str | None = None  # "stream" / "burst": how the latest probe read the host

    @property
    def text(self) -> str:
        """:attr:`activity_text` and how the host is probed: ``idle 42 min [stream]``."""
        shown = self.activity_text
        if self.probe_mode is not None and self.status != "not_running":
            shown += f" [{self.probe_mode}]"
        return shown

    @property
    def activity_text(self) -> str:
        """``busy``, ``idle 42 min``, ``idle ≥ 2 h``, ``unknown``, ``no samples``, ``-``; or,
        when the latest probe failed, ``unknown: probe unreachable (last seen busy)``."""
        if self.status == "not_running":
            return "-"
        if self.probe_failed:
            seen = f" (last seen {self.last_seen})" if self.last_seen else ""
            return f"unknown: probe {self.last_probe_status}{seen}".replace("_", " ")
        shown = self.status.replace("_", " ")
        idle_for = self.idle_for
        if self.status == "idle" and idle_for is not None:
            shown = f"idle {'≥ ' if self.idle_at_least else ''}{format_duration(idle_for)}"
        return shown

    @property
    def probe_failed(self) -> bool:
        """The latest probe of a running instance failed: its GPUs are unknown now."""
        return self.status == "unknown" and self.last_probe_status not in (
            None,
            ProbeStatus.OK.value,
        )

    def as_json(self) -> dict[str, Any]:
        idle_for = self.idle_for
        return {
            "status": self.status,
            "idle_since": json_time(self.idle_since),
            "idle_seconds": round(idle_for.total_seconds()) if idle_for is not None else None,
            "idle_at_least": self.idle_at_least,
            "last_sample_at": json_time(self.last_sample_at),
            "last_busy_at": json_time(self.last_busy_at),
            "last_probe_status": self.last_probe_status,
            "last_probe_at": json_time(self.last_probe_at),
            "last_seen": self.last_seen,
            "probe_mode": self.probe_mode,
        }


def gpu_activity(
    instance: InstanceView,
    now: datetime,
    settings: IdleClockSettings,
    proves_idle: Callable[[SampleSource], bool] | None = None,
) -> GpuActivity:
    """Summarise ``instance.samples`` (the view's window) judged with the idle rule's
    ``settings``, with its idle clock at ``now`` (counting the samples that can prove idle for
    its account, as the rule does) and how the latest probe read the host (``probe_mode``)."""
    episode = current_idle(instance, now, settings, proves_idle)
    clock = GpuActivity("")
    if episode is not None:
        clock = GpuActivity(
            "",
            idle_since=episode.start,
            idle_for=max(now - episode.start, timedelta(0)),
            idle_at_least=episode.armed_by == "arm_after" or episode.start < episode.clock.onset,
        )
    activity = _activity(instance, settings.threshold_percent, clock)
    mode = instance.probes[-1].mode if instance.probes else None
    return replace(activity, probe_mode=mode)


def _activity(instance: InstanceView, threshold_percent: float, clock: GpuActivity) -> GpuActivity:
    """The activity; ``clock`` carries the idle clock's fields (its status is not used)."""
    probe = instance.probes[-1] if instance.probes else None
    base = replace(
        clock,
        last_probe_status=probe.status.value if probe is not None else None,
        last_probe_at=probe.at if probe is not None else None,
    )
    if instance.state is not InstanceState.RUNNING:
        return replace(base, status="not_running")
    history = sample_history(instance.samples)  # in time order
    judged = list(history.judged(history.rows(), threshold_percent))
    activity = _sampled(base, judged)
    if probe is not None and _failed_since(probe, activity.last_sample_at):
        seen = None if not judged else replace(activity, last_probe_status=None).activity_text
        return replace(activity, status="unknown", last_seen=seen)
    return activity


def _sampled(base: GpuActivity, judged: list[tuple[int, int, Verdict]]) -> GpuActivity:
    """``base`` with what the judged samples say (instant in microseconds, GPU, verdict)."""
    if not judged:
        return replace(base, status="no_samples")
    last_busy = max((at for at, _gpu, v in judged if v is Verdict.BUSY), default=None)
    return replace(
        base,
        status=_current(judged),
        last_sample_at=instant(judged[-1][0]),
        last_busy_at=instant(last_busy) if last_busy is not None else None,
    )


def _failed_since(probe: ProbeOutcome, last_sample_at: datetime | None) -> bool:
    """The latest probe failed and no sample is newer than it: the GPUs are unknown now."""
    if probe.status is ProbeStatus.OK:
        return False
    return last_sample_at is None or probe.at >= last_sample_at


def _current(judged: list[tuple[int, int, Verdict]]) -> str:
    """busy, idle or unknown from each GPU's newest judged sample (instant in microseconds,
    GPU, verdict; in time order)."""
    latest: dict[int, Verdict] = {}
    for _at, gpu, verdict in judged:
        latest[gpu] = verdict
    return combine_verdicts(latest.values()).value
