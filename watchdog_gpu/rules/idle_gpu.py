"""idle_gpu: every GPU of a running instance idle for ``idle``.

Intent: end the forgotten instance, the job that finished at 1 a.m. Only *observed* idle time
counts (:mod:`watchdog_gpu.rules.idle_clock`): blind time is never idle. The rule arms only after
the instance showed GPU activity once, or ``arm_after`` after it started running, so a job that
spends its first half hour loading data is not killed. The warning comes at ``idle −
warn_before`` of observed idleness, the action at ``idle``; :func:`next_point` says when the
next of those falls, so the daemon can wake for it. Provider readings count as idle evidence
only where the account opts in (:mod:`watchdog_gpu.evidence`); otherwise they give a
notify-only "looks idle per the provider" finding. ``docs/safety.md``, "Blind time and the idle
clock" and "Evidence strength".

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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field, field_validator

from watchdog_gpu.durations import Duration, PositiveDuration, format_duration
from watchdog_gpu.evidence import EVIDENCE_WEAK, AccountEvidence
from watchdog_gpu.fleet import FleetView, InstanceView
from watchdog_gpu.model import (
    ActionKind,
    Finding,
    SampleSource,
    Severity,
    Verdict,
)
from watchdog_gpu.rules.base import DestructiveRuleConfig, RuleOutcome, RuleSpec
from watchdog_gpu.rules.idle_clock import (
    IdleClock,
    IdleClockSettings,
    IdleEpisode,
    current_idles,
)
from watchdog_gpu.rules.windows import spend_evidence
from watchdog_gpu.sample_history import sample_history
from watchdog_gpu.spend import instance_spend

NAME = "idle_gpu"
# A GPU busier than this is working, whatever the job: a threshold above it would call such a
# GPU idle and destroy it (config check refuses it).
MAX_THRESHOLD_PERCENT = 50.0


class IdleGpuConfig(DestructiveRuleConfig):
    """Every GPU of a running instance idle for "idle", the window covered by real samples."""

    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {"idle_minutes": ("idle", "m")}

    idle: PositiveDuration = Field(
        default=timedelta(minutes=30),
        description=(
            "Every GPU idle this long before the action.\n(Formerly idle_minutes = 30, "
            "still read, with a deprecation note in `config check`.)"
        ),
    )
    arm_after: Duration = Field(
        default=timedelta(minutes=20),
        description=(
            "The rule arms once the instance showed GPU activity, or this long after it "
            "started running."
        ),
    )
    threshold_percent: float = Field(
        default=5.0,
        ge=0,
        description="A GPU is busy when sm, enc, dec, jpg or ofa exceed this percentage. At "
        f"most {MAX_THRESHOLD_PERCENT:g} (`config check` refuses more: a GPU working at half its "
        "capacity would count as idle and be destroyed).",
    )
    min_coverage: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "Fraction of the idle window real samples must cover; less is blind time, "
            "never idle (a blind stretch longer than idle x (1 - min_coverage) restarts "
            "the idle clock)."
        ),
    )
    max_sample_gap: Duration = Field(
        default=timedelta(minutes=3),
        description=(
            "Two samples further apart than this leave blind time between them. Longer "
            "than 0s (an error); shorter than [watchdog] probe_interval is warned about: "
            "the burst probe's and the provider's samples come that far apart, so "
            "idle_gpu would never find those GPUs idle."
        ),
    )

    @field_validator("threshold_percent")
    @classmethod
    def _sane_threshold(cls, value: float) -> float:
        if value > MAX_THRESHOLD_PERCENT:
            raise ValueError(
                f"must be at most {MAX_THRESHOLD_PERCENT:g}: at {value:g} a GPU up to "
                f"{value:g} % busy, doing real work, counts as idle and is destroyed "
                "(the default is 5)"
            )
        return value

    @field_validator("max_sample_gap")
    @classmethod
    def _some_gap(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError(
                "must be longer than 0s: no two samples would be close enough to count as "
                "observed, so idle_gpu would never find an idle GPU (the default is 3m)"
            )
        return value

    @property
    def clock_settings(self) -> IdleClockSettings:
        """The settings the idle clock (:func:`~watchdog_gpu.rules.idle_clock.current_idle`)
        is judged with."""
        return IdleClockSettings(
            idle=self.idle,
            arm_after=self.arm_after,
            threshold_percent=self.threshold_percent,
            min_coverage=self.min_coverage,
            max_sample_gap=self.max_sample_gap,
        )

    @property
    def idle_minutes(self) -> float:
        """``idle`` in minutes (the deprecated key's unit)."""
        return self.idle.total_seconds() / 60


def evaluate(view: FleetView, now: datetime, config: IdleGpuConfig) -> list[Finding]:
    """One finding per running instance whose GPUs are idle (see the module docstring)."""
    return list(evaluate_timed(view, now, config).findings)


def evaluate_timed(view: FleetView, now: datetime, config: IdleGpuConfig) -> RuleOutcome:
    """:func:`evaluate`, and the earliest instant an idle clock reaches the warning point
    (``idle − warn_before``) or the action point (``idle``) — see :func:`next_point`."""
    findings: list[Finding] = []
    earliest: datetime | None = None
    settings = config.clock_settings
    episodes: dict[str, IdleEpisode] = {}
    for key, instance in view.instances.items():
        # Not only listed running: an unknown listing inside a run (a late heartbeat) is blind
        # time in it, and a standing warning must not be withdrawn for it (runs.current_run).
        finding, point, episode = _evaluate_instance(
            instance, now, config, settings, view.evidence_of(instance.latest)
        )
        if finding is not None:
            findings.append(finding)
        if point is not None and (earliest is None or point < earliest):
            earliest = point
        if episode is not None:
            episodes[key] = episode
    return RuleOutcome(tuple(findings), earliest, idle_episodes=episodes)


def next_point(clock: IdleClock, observed: timedelta, config: IdleGpuConfig) -> datetime | None:
    """When ``clock`` (``observed`` so far) reaches its next point — the warning point
    (``idle − warn_before`` of observed idle time), else the action point (``idle``) — if the
    GPUs stay idle and observed from the newest row on; ``None`` once both are reached. (The
    caller gives none while the newest row is more than ``max_sample_gap`` old: blind, nothing
    is due until rows come again.)

    Counted from the newest *observed* instant, not from ``now``: with rows sent in batches the
    point may already have passed on the host while its rows are on the way (then it lies
    before ``now``). An evaluation once those rows are in decides it (``docs/architecture.md``,
    "Wakes"); before a warning there is no finding to read a due time from, so the rule says it.
    """
    for point in (max(config.idle - config.warn_before, timedelta(0)), config.idle):
        if observed < point:
            return clock.last_observed + (point - observed)
    return None


def _evaluate_instance(
    instance: InstanceView,
    now: datetime,
    config: IdleGpuConfig,
    settings: IdleClockSettings,
    evidence: AccountEvidence,
) -> tuple[Finding | None, datetime | None, IdleEpisode | None]:
    """The instance's finding (if any), its clock's next point (:func:`next_point`) and its
    running episode: on the samples that can prove idle (``evidence``); when those do not, but
    the provider's readings say idle for ``idle``, a notify-only finding (looks idle, not
    destroyed)."""
    # The clock on every source (what the instance looks like) only where a provider reading
    # could make it differ: both clocks come from one pass over the samples.
    looks_too = not evidence.reading_proves_idle and sample_history(instance.samples).has_source(
        SampleSource.PROVIDER_API
    )
    episode, looks = current_idles(
        instance, now, settings, evidence.proves_idle, every_source=looks_too
    )
    finding, point = _judge(instance, episode, now, config)
    if finding is not None or looks is None:
        return finding, point, episode
    return _looks_idle(instance, looks, now, config), point, episode


def _looks_idle(
    instance: InstanceView, episode: IdleEpisode, now: datetime, config: IdleGpuConfig
) -> Finding | None:
    """The notify-only finding of an instance whose GPUs read idle for ``idle`` only when the
    provider's per-poll readings count: they prove busy, never idle (evidence.py)."""
    if SampleSource.PROVIDER_API not in episode.sources:
        return None
    clock = episode.clock
    if clock.observed(now) < config.idle:
        return None
    due_at = clock.due(config.idle, now)
    finding = _finding(instance, episode, now, due_at=due_at, first_held=due_at, config=config)
    summary = (
        f"not destroyed: looks idle per the provider ({format_duration(clock.observed(now))}), "
        "unobserved by SSH; a reading per poll proves busy, never idle"
    )
    evidence = {**finding.evidence, EVIDENCE_WEAK: True}
    return replace(
        finding, action=ActionKind.NOTIFY, summary=summary, evidence=evidence, due_at=due_at
    )


def _judge(
    instance: InstanceView, episode: IdleEpisode | None, now: datetime, config: IdleGpuConfig
) -> tuple[Finding | None, datetime | None]:
    # Not running, not armed, no clock, or blind now: no finding, and nothing due until rows
    # come again.
    if episode is None:
        return None, None
    clock = episode.clock
    limit = config.idle
    warn_at = limit - config.warn_before
    observed = clock.observed(now)
    point = next_point(clock, observed, config)
    if observed < warn_at:
        return None, point
    first_held = clock.reached(max(warn_at, timedelta(0))) or now
    due_at = max(clock.due(limit, now), first_held + config.warn_before)
    if episode.start < clock.onset and clock.reached(limit) is not None:
        # The onset is before the view's samples and the view alone already holds ``idle``
        # of observed idleness: due since the stable episode date, not since the view's start
        # (which slides with every tick and would push the action ahead forever).
        first_held = episode.start + limit - config.warn_before
        due_at = episode.start + limit
    finding = _finding(instance, episode, now, due_at=due_at, first_held=first_held, config=config)
    return finding, point


def _finding(
    instance: InstanceView,
    episode: IdleEpisode,
    now: datetime,
    *,
    due_at: datetime,
    first_held: datetime,
    config: IdleGpuConfig,
) -> Finding:
    clock = episode.clock
    observed = clock.observed(now)
    elapsed = now - clock.onset
    covered = observed / elapsed if elapsed > timedelta(0) else 1.0
    span = instance.current_span
    rate = span.billed_usd_per_hour if span is not None else None
    spent = instance_spend(instance, episode.start, now)
    blind = clock.blind(clock.last_observed)  # the holes, not the time since the newest row
    blind_text = f", {format_duration(blind)} blind not counted" if blind.total_seconds() else ""
    summary = (
        f"all {episode.gpus} GPU(s) observed idle for {format_duration(observed)} "
        f"(threshold {config.threshold_percent:g}%{blind_text})"
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
            "idle_onset": clock.onset.isoformat(),
            "observed_idle_seconds": round(observed.total_seconds()),
            "blind_seconds": round(blind.total_seconds()),
            "window_end": now.isoformat(),
            "coverage": round(covered, 3),
            "gpus": episode.gpus,
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
    newest = sample_history(instance.samples).newest_recorded() if instance is not None else {}
    if Verdict.BUSY in newest.values():
        return "GPU busy again"
    return "GPU activity no longer known (samples missing or too sparse); unknown is not idle"


RULE = RuleSpec(
    NAME, IdleGpuConfig, evaluate, cleared=cleared_reason, timed=evaluate_timed, observes_idle=True
)
