"""Episode continuity: a condition that never cleared keeps its first episode.

Rules compute ``episode_started_at`` from the history they can see, and they see only a bounded
lookback. When a condition outlives that window — an idle instance whose destroy failed, a
protected or snoozed instance that stays idle for hours, an instance blind for hours — a rule may
date the episode later than it began, or earlier (idle_gpu falls back to the arming instant and
unobserved to the start of the run once the sample that dated the episode slid out of view),
either of which would change its idempotency key, repeat warnings and actions, and "resolve" the
episode that is in fact still open. So before planning, each finding is stitched to the recorded
episode of the same rule and subject that was still present at the previous evaluation: it keeps
that episode's start and, when dated later, the earlier of the two due times; when dated
earlier, the recorded due time (the one the warning announced: an action never comes sooner
than announced). A condition that cleared (no finding for longer than ``continuity``) starts a
new episode, as it should.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.model import Finding
from watchdog_gpu.notices import EpisodeKey


class RecordedEpisode(Protocol):
    @property
    def episode_key(self) -> str: ...

    @property
    def episode_started_at(self) -> datetime: ...

    @property
    def due_at(self) -> datetime: ...

    @property
    def last_seen(self) -> datetime: ...


def stitch_episodes(
    findings: Sequence[Finding],
    recorded: Iterable[RecordedEpisode],
    now: datetime,
    continuity: timedelta,
) -> list[Finding]:
    """``findings`` with each continuing condition moved onto its recorded episode.

    A recorded episode continues when its key names the same rule and subject (topic
    included) and it was seen within ``continuity`` before ``now``.
    """
    open_episodes: dict[str, RecordedEpisode] = {}
    for episode in recorded:
        if now - episode.last_seen > continuity:
            continue
        prefix = _prefix_of(episode)
        known = open_episodes.get(prefix)
        if known is None or episode.episode_started_at < known.episode_started_at:
            open_episodes[prefix] = episode
    stitched = []
    for finding in findings:
        current = open_episodes.get(f"{finding.rule}:{finding.subject}")
        if current is None or current.episode_started_at == finding.episode_started_at:
            stitched.append(finding)
            continue
        if current.episode_started_at < finding.episode_started_at:
            due_at = min(finding.due_at, current.due_at)
        else:
            due_at = current.due_at  # dated earlier: lost history, not an older condition
        stitched.append(
            replace(finding, episode_started_at=current.episode_started_at, due_at=due_at)
        )
    return stitched


def _prefix_of(episode: RecordedEpisode) -> str:
    """The condition (``rule:subject``) of a recorded episode's key."""
    parsed = EpisodeKey.parse(episode.episode_key)
    return parsed.condition if parsed is not None else episode.episode_key
