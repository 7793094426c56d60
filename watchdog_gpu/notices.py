"""Typed keys (episodes, actions, messages) and the record of warnings: which episode has a
*standing* warning, and since when.

A destructive action follows only a warning sent at least ``warn_before`` earlier and not
withdrawn since (``docs/safety.md``, "Warnings"). Messages are keyed ``{episode_key}:{kind}``; a
second warning or resolution of an episode gets a ``:{epoch seconds}`` suffix, so nothing is
silently "already sent". Keys are read back from the fleet view's ``notice_times``. Pure.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from datetime import datetime

from watchdog_gpu.model import ActionKind

WARNING = "warning"
RESOLUTION = "resolution"
_TRACKED = frozenset({WARNING, RESOLUTION})


DRY_RUN = "dry_run"


@dataclass(frozen=True, slots=True)
class EpisodeKey:
    """An episode key ``{rule}:{subject}:{start ISO}`` (``Finding.episode_key``). The subject
    may hold colons and brackets (``vast-main[ssh_key:k1]``); the start is the ISO text after
    the last colon that begins a valid timestamp."""

    rule: str
    subject: str
    started_at: datetime

    def format(self) -> str:
        return f"{self.rule}:{self.subject}:{self.started_at.isoformat()}"

    @property
    def condition(self) -> str:
        """``rule:subject``: the same condition across episodes."""
        return f"{self.rule}:{self.subject}"

    @classmethod
    def parse(cls, key: str) -> EpisodeKey | None:
        rule, _, rest = key.partition(":")
        cut = rest.find(":")
        while cut != -1:
            try:
                started = datetime.fromisoformat(rest[cut + 1 :])
            except ValueError:
                cut = rest.find(":", cut + 1)
                continue
            return cls(rule, rest[:cut], started) if rule and cut > 0 else None
        return None


@dataclass(frozen=True, slots=True)
class ActionKey:
    """An action's idempotency key ``{episode}:{kind}`` (``:dry_run`` appended for a dry run:
    switching to enforce mid-episode must still act). Only ever formatted: the episode is a
    column of the action's row (``ActionRecord.episode_key``), never parsed back out."""

    episode: str
    kind: ActionKind
    dry_run: bool = False

    def format(self) -> str:
        return f"{self.episode}:{self.kind.value}" + (f":{DRY_RUN}" if self.dry_run else "")

    @property
    def message_episode(self) -> str:
        """The key the action's messages hang on: the episode, with ``:dry_run`` kept for a dry
        run so its message does not take the place of the real action's message."""
        return self.episode + (f":{DRY_RUN}" if self.dry_run else "")


@dataclass(frozen=True, slots=True)
class NoticeKey:
    """A parsed message key ``{episode}:{kind}`` or ``{episode}:{kind}:{n}``."""

    episode: str
    kind: str
    number: int | None = None

    def format(self) -> str:
        base = f"{self.episode}:{self.kind}"
        return base if self.number is None else f"{base}:{self.number}"

    @classmethod
    def parse(cls, key: str, kinds: Container[str] = _TRACKED) -> NoticeKey | None:
        """The parts of ``key``, or None when its kind is not one of ``kinds``. Episode keys
        hold colons (an ISO time ends them), so the key is read from the right."""
        head, _, last = key.rpartition(":")
        if last.isascii() and last.isdigit() and head:
            rest, _, kind = head.rpartition(":")
            if kind in kinds and rest:
                return cls(rest, kind, int(last))
            return None
        if last in kinds and head:
            return cls(head, last)
        return None


@dataclass(frozen=True, slots=True)
class EpisodeNotices:
    """When the latest warning and the latest resolution of one episode were enqueued."""

    last_warning_at: datetime | None = None
    last_resolution_at: datetime | None = None

    @property
    def standing_since(self) -> datetime | None:
        """The time of the warning that stands (sent and not withdrawn since), or None."""
        warned = self.last_warning_at
        if warned is None:
            return None
        resolved = self.last_resolution_at
        return warned if resolved is None or resolved < warned else None


def index_notices(notice_times: Mapping[str, datetime]) -> dict[str, EpisodeNotices]:
    """Warnings and resolutions by episode key, from message keys and their enqueue times."""
    index: dict[str, EpisodeNotices] = {}
    for key, at in notice_times.items():
        parsed = NoticeKey.parse(key)
        if parsed is None:
            continue
        known = index.get(parsed.episode, EpisodeNotices())
        if parsed.kind == WARNING:
            if known.last_warning_at is None or at > known.last_warning_at:
                known = EpisodeNotices(at, known.last_resolution_at)
        elif known.last_resolution_at is None or at > known.last_resolution_at:
            known = EpisodeNotices(known.last_warning_at, at)
        index[parsed.episode] = known
    return index


def next_notice_key(episode: str, kind: str, existing: Container[str], now: datetime) -> str:
    """The key of a new ``kind`` message of ``episode``: the plain key the first time, then
    one made unique by ``now`` (one per tick; a replan in the same tick is a no-op)."""
    plain = NoticeKey(episode, kind).format()
    if plain not in existing:
        return plain
    return NoticeKey(episode, kind, int(now.timestamp())).format()
