"""Episode continuity: a condition that never cleared keeps its first episode.

Rules compute ``episode_started_at`` from the history they can see, and they see only a bounded
lookback. When a condition outlives that window — an idle instance whose destroy failed, a
protected or snoozed instance that stays idle for hours — a rule may date the episode later
than it began, which would change its idempotency key and repeat warnings and actions. So
before planning, each finding is stitched to the recorded episode of the same rule and subject
that was still present at the previous evaluation: it keeps that episode's start and the earlier
of the two due times. A condition that cleared (no finding for longer than ``continuity``)
starts a new episode, as it should.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.model import Finding


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
    included), it was seen within ``continuity`` before ``now``, and it began earlier than the
    finding says.
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
        earlier = open_episodes.get(f"{finding.rule}:{finding.subject}")
        if earlier is None or earlier.episode_started_at >= finding.episode_started_at:
            stitched.append(finding)
            continue
        stitched.append(
            replace(
                finding,
                episode_started_at=earlier.episode_started_at,
                due_at=min(finding.due_at, earlier.due_at),
            )
        )
    return stitched


def _prefix_of(episode: RecordedEpisode) -> str:
    """``rule:subject`` of an episode key ``rule:subject:ISO-start`` (subjects may hold colons:
    the start's ISO text is cut off the end instead)."""
    suffix = ":" + episode.episode_started_at.isoformat()
    key = episode.episode_key
    return key[: -len(suffix)] if key.endswith(suffix) else key
