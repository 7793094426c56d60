"""resolutions.cleared_episodes: which episodes get a resolution, with which key and reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from watchdog_gpu.fleet import ActionRecord, FleetView
from watchdog_gpu.model import ActionKind, ActionStatus, Finding, Severity
from watchdog_gpu.resolutions import cleared_episodes

NOW = datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
START = NOW - timedelta(hours=1)


@dataclass(frozen=True)
class Recorded:
    rule: str = "idle_gpu"
    account: str = "vast-main"
    instance_id: str | None = "9001"
    severity: Severity = Severity.WARNING
    action: ActionKind = ActionKind.DESTROY
    summary: str = "idle"
    episode_started_at: datetime = START
    due_at: datetime = NOW
    evidence: dict[str, str | int | float | bool | None] = field(default_factory=dict)

    @property
    def episode_key(self) -> str:
        return (
            f"{self.rule}:{self.account}/{self.instance_id}:{self.episode_started_at.isoformat()}"
        )


def view(times: dict[str, datetime], actions: tuple[ActionRecord, ...] = ()) -> FleetView:
    return FleetView(
        now=NOW, notice_times=times, notification_keys=frozenset(times), recent_actions=actions
    )


def test_a_standing_warning_is_withdrawn_when_its_condition_clears() -> None:
    record = Recorded()
    (resolution,) = cleared_episodes(
        [], [record], view({f"{record.episode_key}:warning": NOW - timedelta(minutes=5)}), (), NOW
    )
    assert resolution.key == f"{record.episode_key}:resolution"
    assert resolution.episode == record.episode_key
    assert resolution.action_cancelled
    assert resolution.reason == "instance gone"  # not in the view any more


def test_a_second_withdrawal_of_the_same_episode_gets_its_own_key() -> None:
    record = Recorded()
    times = {
        f"{record.episode_key}:warning": NOW - timedelta(hours=1),
        f"{record.episode_key}:resolution": NOW - timedelta(minutes=50),
        f"{record.episode_key}:warning:1": NOW - timedelta(minutes=5),
    }
    (resolution,) = cleared_episodes([], [record], view(times), (), NOW)
    key = f"{record.episode_key}:resolution:{int(NOW.timestamp())}"
    assert resolution.key == key


def test_nothing_to_resolve_when_still_present_withdrawn_or_acted_on() -> None:
    record = Recorded()
    episode = record.episode_key
    warned = {f"{episode}:warning": NOW - timedelta(minutes=5)}
    present = Finding(
        "idle_gpu", "vast-main", "9001", Severity.WARNING, ActionKind.DESTROY, "idle", START, NOW
    )
    assert cleared_episodes([present], [record], view(warned), (), NOW) == []
    withdrawn = {**warned, f"{episode}:resolution": NOW - timedelta(minutes=1)}
    assert cleared_episodes([], [record], view(withdrawn), (), NOW) == []
    assert cleared_episodes([], [record], view(warned), (episode,), NOW) == []
    action = ActionRecord(
        f"{episode}:destroy",
        "vast-main",
        "9001",
        "idle_gpu",
        ActionKind.DESTROY,
        ActionStatus.VERIFIED,
        False,
        NOW - timedelta(minutes=1),
        episode,
    )
    assert cleared_episodes([], [record], view(warned, (action,)), (), NOW) == []


def test_an_alert_is_resolved_once() -> None:
    record = Recorded(rule="unobserved", action=ActionKind.NOTIFY)
    alerted = {f"{record.episode_key}:alert": NOW - timedelta(minutes=5)}
    (resolution,) = cleared_episodes([], [record], view(alerted), (), NOW)
    assert not resolution.action_cancelled
    resolved = {**alerted, f"{record.episode_key}:resolution": NOW - timedelta(minutes=1)}
    assert cleared_episodes([], [record], view(resolved), (), NOW) == []
