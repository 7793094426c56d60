from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from watchdog_gpu.episodes import stitch_episodes
from watchdog_gpu.model import ActionKind, Finding, Severity

NOW = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)
CONTINUITY = timedelta(minutes=3)


@dataclass(frozen=True)
class Recorded:
    episode_key: str
    episode_started_at: datetime
    due_at: datetime
    last_seen: datetime


def finding(
    started: datetime, *, topic: str | None = None, instance: str | None = "9001"
) -> Finding:
    return Finding(
        rule="idle_gpu",
        account="vast-main",
        instance_id=instance,
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="idle",
        episode_started_at=started,
        due_at=started + timedelta(minutes=30),
        topic=topic,
    )


def recorded_from(item: Finding, last_seen: datetime) -> Recorded:
    return Recorded(item.episode_key, item.episode_started_at, item.due_at, last_seen)


def test_a_condition_that_never_cleared_keeps_its_first_episode() -> None:
    first = finding(NOW - timedelta(hours=3))
    later = finding(NOW - timedelta(minutes=70))
    (stitched,) = stitch_episodes(
        [later], [recorded_from(first, NOW - timedelta(minutes=1))], NOW, CONTINUITY
    )
    assert stitched.episode_key == first.episode_key
    assert stitched.due_at == first.due_at


def test_a_condition_that_cleared_starts_a_new_episode() -> None:
    first = finding(NOW - timedelta(hours=3))
    later = finding(NOW - timedelta(minutes=40))
    (stitched,) = stitch_episodes(
        [later], [recorded_from(first, NOW - timedelta(minutes=30))], NOW, CONTINUITY
    )
    assert stitched.episode_key == later.episode_key


def test_other_subjects_and_topics_are_not_stitched() -> None:
    first = finding(NOW - timedelta(hours=3), topic="ssh_key:k1")
    other = finding(NOW - timedelta(minutes=10), topic="ssh_key:k2")
    elsewhere = finding(NOW - timedelta(minutes=10), instance="9002")
    result = stitch_episodes([other, elsewhere], [recorded_from(first, NOW)], NOW, CONTINUITY)
    assert [f.episode_key for f in result] == [other.episode_key, elsewhere.episode_key]


def test_topics_with_colons_still_match_their_own_episode() -> None:
    first = finding(NOW - timedelta(hours=3), topic="ssh_key:k1")
    later = finding(NOW - timedelta(minutes=10), topic="ssh_key:k1")
    (stitched,) = stitch_episodes([later], [recorded_from(first, NOW)], NOW, CONTINUITY)
    assert stitched.episode_key == first.episode_key


def test_a_finding_already_on_its_episode_is_unchanged() -> None:
    item = finding(NOW - timedelta(hours=1))
    assert stitch_episodes([item], [recorded_from(item, NOW)], NOW, CONTINUITY) == [item]


def test_a_condition_dated_earlier_after_losing_its_history_keeps_its_episode() -> None:
    # unobserved / idle_gpu fall back to an earlier instant (the run's start, the arming) once
    # the sample that dated the episode slid out of their lookback: still the same episode.
    first = finding(NOW - timedelta(minutes=80))
    redated = finding(NOW - timedelta(hours=2))
    (stitched,) = stitch_episodes(
        [redated], [recorded_from(first, NOW - timedelta(minutes=1))], NOW, CONTINUITY
    )
    assert stitched.episode_key == first.episode_key
    assert stitched.due_at == first.due_at


def test_a_condition_dated_earlier_after_it_cleared_is_a_new_episode() -> None:
    first = finding(NOW - timedelta(minutes=80))
    redated = finding(NOW - timedelta(hours=2))
    (stitched,) = stitch_episodes(
        [redated], [recorded_from(first, NOW - timedelta(minutes=10))], NOW, CONTINUITY
    )
    assert stitched == redated
