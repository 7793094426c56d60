"""Which episodes are resolved this tick, and how: the message that closes an episode.

An episode whose warning stands or whose alert went out, and whose condition is gone (no
finding this tick, not even at another severity: an escalation is not a resolution), gets one
resolution — unless it ended in an action, whose own message closes
it (that message may only be written later in the same tick, by the executor). Resolving an
episode with a standing warning withdraws the warning (docs/safety.md, "Warnings"): the planned
stop/destroy is cancelled, and a later one needs a new warning. An alert is resolved once per
episode.

Pure: the caller (``tick.Watchdog``) passes the recorded findings, the fleet view, the action
keys it planned this tick and ``now``, and writes what comes back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.notices import (
    RESOLUTION,
    EpisodeNotices,
    index_notices,
    next_notice_key,
)
from watchdog_gpu.rules import cleared_reason


class RecordedFinding(Protocol):
    """A recorded finding episode (the store's ``FindingRecord``)."""

    @property
    def episode_key(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def instance_id(self) -> str | None: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def action(self) -> ActionKind: ...
    @property
    def summary(self) -> str: ...
    @property
    def episode_started_at(self) -> datetime: ...
    @property
    def due_at(self) -> datetime: ...
    @property
    def evidence(self) -> Mapping[str, str | int | float | bool | None]: ...


@dataclass(frozen=True, slots=True)
class Resolution:
    """One episode to close: its finding as last recorded, why, whether the warned-about action
    is cancelled (a standing warning withdrawn), and the key of the message that closes it (the
    caller renders it: ``notify.render.render_resolution``)."""

    finding: Finding
    reason: str
    action_cancelled: bool
    episode: str
    key: str


def cleared_episodes(
    current: Iterable[Finding],
    recorded: Iterable[RecordedFinding],
    view: FleetView,
    planned_episodes: Collection[str],
    now: datetime,
) -> list[Resolution]:
    """The resolutions due at ``now`` (see the module docstring)."""
    present = _present_episodes(current)
    keys = view.notification_keys
    notices = index_notices(view.notice_times)
    # Episodes with an action (a dry run's too: it closes its episode as well).
    acted = {r.episode_key for r in view.recent_actions} | set(planned_episodes)
    resolutions: list[Resolution] = []
    for record in recorded:
        episode = record.episode_key
        if episode in present or _acted_on(episode, acted, keys):
            continue
        standing = notices.get(episode, EpisodeNotices()).standing_since is not None
        alerted = f"{episode}:alert" in keys and f"{episode}:resolution" not in keys
        if not (standing or alerted):
            continue
        finding = _recorded_finding(record)
        key = next_notice_key(episode, RESOLUTION, keys, now)
        resolutions.append(
            Resolution(finding, cleared_reason(finding, view), standing, episode, key)
        )
    return resolutions


def _present_episodes(current: Iterable[Finding]) -> set[str]:
    """The episodes the current findings stand for: a condition that changed severity is
    still present under its other episode key."""
    present: set[str] = set()
    for finding in current:
        present.add(finding.episode_key)
        present.update(finding.same_condition_as)
    return present


def _acted_on(episode: str, acted: Collection[str], keys: Collection[str]) -> bool:
    """Whether an action (a dry run's too) or its message closes the episode already."""
    return episode in acted or f"{episode}:action" in keys


def _recorded_finding(record: RecordedFinding) -> Finding:
    return Finding(
        rule=record.rule,
        account=record.account,
        instance_id=record.instance_id,
        severity=record.severity,
        action=record.action,
        summary=record.summary,
        episode_started_at=record.episode_started_at,
        due_at=record.due_at,
        evidence=record.evidence,
    )
