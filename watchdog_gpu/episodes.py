"""Episode continuity: a condition that never cleared keeps its first episode.

A rule sees a bounded lookback, so it may date a long condition differently from tick to tick;
each finding is stitched to the recorded episode of the same rule and subject still present at
the previous evaluation, keeping its start and never an earlier due time than announced.
``docs/safety.md``, "Episodes that outlive the lookback". Pure: no I/O, no clock.
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
