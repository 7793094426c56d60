"""Typed keys: episode, action and message keys format and parse back, whatever the subject."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.notices import (
    ActionKey,
    EpisodeKey,
    EpisodeNotices,
    NoticeKey,
    index_notices,
    next_notice_key,
)

NOW = datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
subjects = st.text(
    st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30
).filter(lambda text: not text.startswith(":"))
starts = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
)
kinds = st.sampled_from([ActionKind.DESTROY, ActionKind.STOP])


@given(subject=subjects, started=starts)
def test_an_episode_key_parses_back_to_its_parts(subject: str, started: datetime) -> None:
    key = EpisodeKey("idle_gpu", subject, started)
    assert EpisodeKey.parse(key.format()) == key


def test_an_episode_key_is_the_findings() -> None:
    finding = Finding(
        "hygiene",
        "vast-main",
        None,
        Severity.INFO,
        ActionKind.NOTIFY,
        "s",
        NOW,
        NOW,
        topic="ssh_key:k1",
    )
    parsed = EpisodeKey.parse(finding.episode_key)
    assert parsed is not None
    assert parsed.condition == "hygiene:vast-main[ssh_key:k1]"


@given(subject=subjects, started=starts, kind=kinds, dry_run=st.booleans())
def test_an_action_key_is_its_episode_and_kind(
    subject: str, started: datetime, kind: ActionKind, dry_run: bool
) -> None:
    episode = EpisodeKey("budget", subject, started).format()
    key = ActionKey(episode, kind, dry_run)
    assert key.format() == f"{episode}:{kind.value}" + (":dry_run" if dry_run else "")
    assert key.message_episode == episode + (":dry_run" if dry_run else "")


@given(subject=subjects, started=starts, number=st.none() | st.integers(0, 2**40))
def test_a_message_key_parses_back(subject: str, started: datetime, number: int | None) -> None:
    episode = EpisodeKey("idle_gpu", subject, started).format()
    for kind in ("warning", "resolution"):
        key = NoticeKey(episode, kind, number)
        assert NoticeKey.parse(key.format()) == key


def test_other_keys_are_not_parsed_as_what_they_are_not() -> None:
    assert NoticeKey.parse("fuse:2026-03-02T22:30:00+00:00") is None
    assert EpisodeKey.parse("no-time-here") is None


def test_a_warning_stands_until_a_later_resolution_withdraws_it() -> None:
    episode = "idle_gpu:vast-main/1:2026-03-02T20:00:00+00:00"
    sent = NOW - timedelta(minutes=20)
    times = {f"{episode}:warning": sent}
    assert index_notices(times)[episode].standing_since == sent
    times[f"{episode}:resolution"] = NOW - timedelta(minutes=10)
    assert index_notices(times)[episode].standing_since is None
    again = next_notice_key(episode, "warning", times, NOW)
    assert again == f"{episode}:warning:{int(NOW.timestamp())}"
    times[again] = NOW
    assert index_notices(times)[episode] == EpisodeNotices(NOW, NOW - timedelta(minutes=10))
    assert index_notices(times)[episode].standing_since == NOW
