"""idle_gpu: every GPU of a running instance idle for ``idle``.

Intent: end the forgotten instance, the job that finished at 1 a.m. The window must be covered by
real samples (``min_coverage``): missing data is blind time, never idle. The rule arms only after
the instance showed GPU activity once, or ``arm_after`` after it started running, so a job that
spends its first half hour loading data is not killed.

```toml
[rules.idle_gpu]
idle = "30m"
arm_after = "20m"
threshold_percent = 5
min_coverage = 0.8
max_sample_gap = "3m"
action = "destroy"
warn_before = "10m"
```

How it decides, for each running instance:

- A GPU sample is busy when sm/enc/dec/jpg/ofa exceeds ``threshold_percent`` (recomputed here
  from the metric values); a sample without ``sm`` (MIG) is busy if the probe saw processes and
  unknown otherwise — never idle. An interactive login reported by a probe is activity too.
- Samples from ``nvidia-smi dmon`` and from the provider's API are merged per GPU; either one
  saying busy is activity.
- **Episode start**: the last activity since the instance started running; when it showed none,
  the arming instant (``arm_after`` after it started running). Before that, nothing fires.
- **Covered**: time between two consecutive idle samples of a GPU at most ``max_sample_gap``
  apart (set it to about twice the probe interval). Every GPU of the instance (``gpu_count``)
  must be covered; a GPU without samples is unknown. The window checked is the last
  ``idle`` (or, before the limit, the episode so far); its coverage must reach
  ``min_coverage`` and the newest idle sample of every GPU must be at most ``max_sample_gap``
  old — the blind minutes must never be the most recent ones, when a job could have started.
- A finding is emitted from ``warn_before`` ahead of the limit on, for as long as the condition
  holds, with ``due_at = episode start + idle``. If the condition first held later than
  the start of that warning window (coverage recovered after an SSH outage), ``due_at`` is
  pushed to that first moment + ``warn_before``, so the user always gets the full warning.
  ``due_at`` is computed from recorded samples: stable across ticks, and it only ever moves
  later.
- The rule sees only the samples the fleet view holds (the store's ``lookback``). Give it at
  least :func:`minimum_sample_lookback`; better, the whole current run. When the last activity
  has slid out of the view, the episode is dated by arming (``arm_after`` after the run
  started): a firing still needs a covered, idle window of ``idle`` inside the view.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field

from watchdog_gpu.durations import Duration, PositiveDuration, format_duration
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    GpuSample,
    InstanceState,
    SampleSource,
    Severity,
    Verdict,
)
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleSpec
from watchdog_gpu.rules.windows import (
    coverage,
    expected_gpus,
    running_since,
    sample_verdict,
    spend_evidence,
)
from watchdog_gpu.spend import instance_spend

NAME = "idle_gpu"


class IdleGpuConfig(DestructiveRuleConfig):
    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {"idle_minutes": ("idle", "m")}

    idle: PositiveDuration = Field(
        default=timedelta(minutes=30), description="every GPU idle this long before the action"
    )
    arm_after: Duration = Field(
        default=timedelta(minutes=20),
        description="arm this long after the instance started running, even without activity",
    )
    threshold_percent: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="a GPU is busy when sm/enc/dec/jpg/ofa exceed this percentage",
    )
    min_coverage: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="fraction of the idle window real samples must cover; less is blind time",
    )
    max_sample_gap: Duration = Field(
        default=timedelta(minutes=3),
        description=(
            "two samples further apart than this leave blind time between them "
            "(about twice the probe interval)"
        ),
    )

    @property
    def idle_minutes(self) -> float:
        """``idle`` in minutes (the deprecated key's unit)."""
        return self.idle.total_seconds() / 60


@dataclass(frozen=True, slots=True)
class _Episode:
    """The facts an idle episode is judged on."""

    start: datetime
    armed_by: str  # "activity" or "arm_after"
    last_activity: datetime | None
    idle_times: Mapping[int, Sequence[datetime]]  # per GPU, sorted
    sources: frozenset[SampleSource]
    horizon: datetime | None  # the oldest sample the view holds for the instance


def evaluate(view: FleetView, now: datetime, config: IdleGpuConfig) -> list[Finding]:
    """One finding per running instance whose GPUs are idle (see the module docstring)."""
    findings: list[Finding] = []
    for instance in view.instances.values():
        if instance.state is not InstanceState.RUNNING:
            continue
        finding = _evaluate_instance(instance, now, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _evaluate_instance(
    instance: InstanceView, now: datetime, config: IdleGpuConfig
) -> Finding | None:
    since = running_since(instance)
    if since is None:
        return None
    episode = _episode(instance, since, now, config)
    if episode is None:
        return None
    limit = config.idle
    warn_from = episode.start + limit - config.warn_before
    if now < warn_from or _window_coverage(episode, now, config) is None:
        return None
    first_held = _first_time_held(episode, warn_from, now, config)
    due_at = max(episode.start + limit, first_held + config.warn_before)
    return _finding(instance, episode, now, due_at=due_at, first_held=first_held, config=config)


def _episode(
    instance: InstanceView, since: datetime, now: datetime, config: IdleGpuConfig
) -> _Episode | None:
    # One pass over the samples: at thousands of instances with days of samples, this is the
    # rule's whole cost.
    last_activity: datetime | None = None
    idle: dict[int, list[tuple[datetime, SampleSource]]] = defaultdict(list)
    seen_gpus: set[int] = set()
    for sample in instance.samples:
        if not since <= sample.at <= now:
            continue
        seen_gpus.add(sample.gpu_index)
        verdict = sample_verdict(sample, config.threshold_percent)
        if verdict is Verdict.BUSY:
            last_activity = sample.at if last_activity is None else max(last_activity, sample.at)
        elif verdict is Verdict.IDLE:
            idle[sample.gpu_index].append((sample.at, sample.source))
    for probe in instance.probes:
        if probe.interactive_login and since <= probe.at <= now:
            last_activity = probe.at if last_activity is None else max(last_activity, probe.at)
    if last_activity is not None:
        start, armed_by = last_activity, "activity"
    else:
        start, armed_by = since + config.arm_after, "arm_after"
        if now < start:
            return None  # not armed: start-up, data loading, a slow first epoch
    gpus = expected_gpus(instance.latest.gpu_count, seen_gpus)
    if not gpus:
        return None
    # Only samples from the episode start on: an idle sample before the last activity must not
    # pair with one after it and paper over the busy moment in between.
    in_episode = {gpu: sorted(item for item in idle[gpu] if item[0] >= start) for gpu in gpus}
    idle_times = {gpu: [at for at, _source in items] for gpu, items in in_episode.items()}
    sources = frozenset(source for items in in_episode.values() for _at, source in items)
    horizon = min((s.at for s in instance.samples), default=None)
    return _Episode(start, armed_by, last_activity, idle_times, sources, horizon)


def _window_start(episode: _Episode, moment: datetime, config: IdleGpuConfig) -> datetime:
    return max(episode.start, moment - config.idle)


def _window_coverage(episode: _Episode, moment: datetime, config: IdleGpuConfig) -> float | None:
    """The smallest per-GPU coverage of the window ending at ``moment``, using only samples
    recorded up to ``moment``; ``None`` when the window is not covered enough."""
    start = _window_start(episode, moment, config)
    worst = 1.0
    for times in episode.idle_times.values():
        end = bisect_right(times, moment)
        if end == 0 or moment - times[end - 1] > config.max_sample_gap:
            return None  # the most recent minutes are blind: a job may have just started
        # From the last sample before the window: the pair straddling its start counts.
        begin = max(bisect_left(times, start) - 1, 0)
        worst = min(worst, coverage(times[begin:end], start, moment, config.max_sample_gap))
    if worst < config.min_coverage:
        return None
    return worst


def _first_time_held(
    episode: _Episode, warn_from: datetime, now: datetime, config: IdleGpuConfig
) -> datetime:
    """The first moment from ``warn_from`` on at which the condition held (checked at the
    sample instants, as a tick then would have seen it); ``now`` if only now.

    When the view's samples do not reach back to ``warn_from`` (the store loaded a shorter
    lookback than this episode), the rule cannot tell whether a warning was possible then and
    returns ``warn_from``: pushing the due time from the first visible instant instead would move
    it with every tick and never let it arrive.
    """
    if episode.horizon is None or warn_from < episode.horizon:
        return warn_from
    instants = sorted(
        {t for times in episode.idle_times.values() for t in times if warn_from <= t <= now}
        | {warn_from}
    )
    for moment in instants:
        if _window_coverage(episode, moment, config) is not None:
            return moment
    return now


def _finding(
    instance: InstanceView,
    episode: _Episode,
    now: datetime,
    *,
    due_at: datetime,
    first_held: datetime,
    config: IdleGpuConfig,
) -> Finding:
    window_start = _window_start(episode, now, config)
    covered = _window_coverage(episode, now, config) or 0.0
    samples_in_window = sum(
        1 for times in episode.idle_times.values() for t in times if window_start <= t <= now
    )
    span = instance.current_span
    rate = span.billed_usd_per_hour if span is not None else None
    spent = instance_spend(instance.spans, episode.start, now)
    idle_for = format_duration(now - episode.start)
    summary = (
        f"all {len(episode.idle_times)} GPU(s) idle for {idle_for} "
        f"(threshold {config.threshold_percent:g}%, {covered:.0%} of the window covered)"
    )
    return Finding(
        rule=NAME,
        account=instance.latest.account,
        instance_id=instance.latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind(config.action),
        summary=summary,
        episode_started_at=episode.start,
        due_at=due_at,
        evidence={
            "instance_name": instance.latest.name,
            **spend_evidence(spent),
            "idle_since": episode.start.isoformat(),
            "window_start": window_start.isoformat(),
            "window_end": now.isoformat(),
            "coverage": round(covered, 3),
            "gpus": len(episode.idle_times),
            "idle_samples_in_window": samples_in_window,
            "armed_by": episode.armed_by,
            "last_activity_at": (
                episode.last_activity.isoformat() if episode.last_activity else None
            ),
            "first_confirmed_at": first_held.isoformat(),
            "threshold_percent": config.threshold_percent,
            "sources": ",".join(sorted(source.value for source in episode.sources)),
        },
        usd_per_hour_at_stake=rate,
    )


def minimum_sample_lookback(config: IdleGpuConfig) -> timedelta:
    """The shortest sample history that lets the rule see an episode from arming to its due
    time, including the warning window."""
    return config.arm_after + config.idle + config.warn_before + config.max_sample_gap


def cleared_reason(finding: Finding, view: FleetView) -> str:
    """Why an idle episode of a running instance ended: a GPU's newest sample is busy, or —
    not that — the samples no longer cover the window (missing or too sparse), which is not
    idle but is not "busy again" either."""
    instance = view.instances.get(f"{finding.account}/{finding.instance_id}")
    newest: dict[int, GpuSample] = {}
    for sample in instance.samples if instance is not None else ():  # oldest first
        newest[sample.gpu_index] = sample
    if any(sample.verdict is Verdict.BUSY for sample in newest.values()):
        return "GPU busy again"
    return "GPU activity no longer known (samples missing or too sparse); unknown is not idle"


RULE = RuleSpec(NAME, IdleGpuConfig, evaluate, cleared=cleared_reason)
