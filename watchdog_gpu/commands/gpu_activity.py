"""What the recorded GPU samples say about an instance right now, for ``watchdog-gpu status``.

A summary for people, not a decision: the idle rule judges windows with coverage
(:mod:`watchdog_gpu.probe.window`); this only says what the latest samples show and since when.
Unknown is not idle here either: a GPU whose latest sample is unknown makes the instance
``unknown``, and an unknown sample ends an idle run. Neither is an unreachable GPU busy: when
the latest probe failed (SSH down, timed out, unreadable output), what the GPUs do now is unknown,
whatever the older samples said (they are shown as "last seen").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from watchdog_gpu.commands.common import json_time
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.model import InstanceState, ProbeStatus, Verdict
from watchdog_gpu.notify.render import format_duration
from watchdog_gpu.sample_history import instant, sample_history


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """``status``: busy, idle, unknown, no_samples or not_running. ``idle_since`` is the first
    idle sample after the last non-idle one; ``idle_at_least`` is true when every sample of the
    window is idle (the run may have started earlier)."""

    status: str
    idle_since: datetime | None = None
    idle_at_least: bool = False
    last_sample_at: datetime | None = None
    last_busy_at: datetime | None = None
    last_probe_status: str | None = None
    last_probe_at: datetime | None = None
    last_seen: str | None = None  # what the samples said before the probe started failing
    probe_mode: str | None = None  # "stream" / "burst": how the latest probe read the host

    @property
    def idle_for(self) -> timedelta | None:
        if self.idle_since is None or self.last_sample_at is None:
            return None
        return self.last_sample_at - self.idle_since

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


def gpu_activity(instance: InstanceView, threshold_percent: float) -> GpuActivity:
    """Summarise ``instance.samples`` (the view's window) judged with ``threshold_percent``,
    with how the latest probe read the host (``probe_mode``)."""
    activity = _activity(instance, threshold_percent)
    mode = instance.probes[-1].mode if instance.probes else None
    return replace(activity, probe_mode=mode)


def _activity(instance: InstanceView, threshold_percent: float) -> GpuActivity:
    probe = instance.probes[-1] if instance.probes else None
    probe_status = probe.status.value if probe is not None else None
    probe_at = probe.at if probe is not None else None
    if instance.state is not InstanceState.RUNNING:
        return GpuActivity("not_running", last_probe_status=probe_status, last_probe_at=probe_at)
    history = sample_history(instance.samples)  # in time order
    judged = list(history.judged(history.rows(), threshold_percent))
    last_sample_at = instant(judged[-1][0]) if judged else None
    if not judged:
        activity = GpuActivity("no_samples", last_probe_status=probe_status, last_probe_at=probe_at)
    else:
        last_busy = max((at for at, _gpu, v in judged if v is Verdict.BUSY), default=None)
        status, idle_since, at_least = _current(judged)
        activity = GpuActivity(
            status,
            idle_since=idle_since,
            idle_at_least=at_least,
            last_sample_at=last_sample_at,
            last_busy_at=instant(last_busy) if last_busy is not None else None,
            last_probe_status=probe_status,
            last_probe_at=probe_at,
        )
    failed = probe is not None and probe.status is not ProbeStatus.OK
    if failed and (last_sample_at is None or probe_at is None or probe_at >= last_sample_at):
        seen = None if not judged else replace(activity, last_probe_status=None).activity_text
        return replace(activity, status="unknown", last_seen=seen)
    return activity


def _current(judged: list[tuple[int, int, Verdict]]) -> tuple[str, datetime | None, bool]:
    """(status, idle since, "at least") from the judged samples (instant in microseconds, GPU,
    verdict), in time order."""
    latest: dict[int, Verdict] = {}
    for _at, gpu, verdict in judged:
        latest[gpu] = verdict
    verdicts = set(latest.values())
    if Verdict.BUSY in verdicts:
        return "busy", None, False
    if verdicts != {Verdict.IDLE}:
        return "unknown", None, False
    last_active = max((at for at, _gpu, v in judged if v is not Verdict.IDLE), default=None)
    if last_active is None:
        return "idle", instant(judged[0][0]), True
    since = min((at for at, _gpu, _v in judged if at > last_active), default=None)
    if since is None:  # an idle and a non-idle sample of one GPU at the same instant
        return "unknown", None, False
    return "idle", instant(since), False
