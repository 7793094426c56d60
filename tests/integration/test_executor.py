"""The executor against a real SQLite store and a scripted provider: every path of an action."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import freeze_clock, isolate, run
from tests.support.cycles import cyclic_garbage
from watchdog_gpu.call_policy import MAX_REFUSED_CALLS, listed_change
from watchdog_gpu.errors import AuthError, PermanentError, ProviderError, TransientError
from watchdog_gpu.executor import CALLING, Executor
from watchdog_gpu.fleet import AcceptedCall, ProtectionKind
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionKind,
    ActionStatus,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
)
from watchdog_gpu.plan import PlanContext
from watchdog_gpu.rules.base import SalvageConfig
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.spend import total_spend
from watchdog_gpu.store import Store
from watchdog_gpu.wiring import action_guard

NOW = datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
KEY = "idle_gpu:vast-main/9001:2026-03-02T22:00:00+00:00:destroy"


def snapshot(state: InstanceState = InstanceState.RUNNING) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="vast-main",
        instance_id="9001",
        name="train",
        state=state,
        raw_state=state.value,
        observed_at=NOW,
        compute_usd_per_hour=0.37,
        storage_usd_per_hour=0.01,
        ssh_host="127.0.0.1",
        ssh_port=22001,
        ssh_user="root",
    )


@dataclass
class ScriptedProvider:
    """A provider whose listing and call results the test scripts; it records every call."""

    name: str = "vast"
    account: str = "vast-main"
    supports_stop: bool = True
    listing: list[InstanceSnapshot] = field(default_factory=lambda: [snapshot()])
    call_errors: list[ProviderError] = field(default_factory=list)
    gone_after_call: bool = True
    calls: list[tuple[str, str]] = field(default_factory=list)

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        return tuple(self.listing)

    def destroy(self, instance_id: str) -> None:
        self._call("destroy", instance_id)

    def stop(self, instance_id: str) -> None:
        self._call("stop", instance_id)

    def _call(self, kind: str, instance_id: str) -> None:
        self.calls.append((kind, instance_id))
        if self.call_errors:
            raise self.call_errors.pop(0)
        if self.gone_after_call:
            self.listing = []


@dataclass
class FailingListing(ScriptedProvider):
    """Accepts calls, but every listing fails (an outage right after the destroy call)."""

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        raise TransientError("vast: HTTP 500")


@dataclass
class FailsAfterTheCall(ScriptedProvider):
    """Lists the instance before the call (the listing at the call), then every listing fails
    (an outage right after the destroy call)."""

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        if not self.calls:
            return super().list_instances(now)
        raise TransientError("vast: HTTP 500")


def enqueue(store: Store, *, dry_run: bool = False, kind: ActionKind = ActionKind.DESTROY) -> None:
    store.record_observation(
        AccountObservation(AccountSnapshot("vast", "vast-main", NOW), (snapshot(),)), NOW
    )
    action = PlannedAction(
        idempotency_key=KEY,
        account="vast-main",
        instance_id="9001",
        rule="idle_gpu",
        kind=kind,
        dry_run=dry_run,
        reason="idle for 30 min",
        planned_at=NOW,
        episode_key=KEY.removesuffix(":destroy"),
        usd_per_hour_at_stake=0.38,
    )
    assert store.enqueue_action(action)


def executor(store: Store, provider: ScriptedProvider, **kwargs: object) -> Executor:
    return Executor(store, {"vast-main": provider}, SafetyConfig(), **kwargs)  # type: ignore[arg-type,dict-item]


def audit_kinds(store: Store) -> list[str]:
    return [event.kind for event in store.list_audit_events()]


def test_a_destroy_is_called_then_verified_by_re_listing(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider()
    runner = executor(store, provider)
    runner.run(NOW)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CALLED
    assert provider.calls == [("destroy", "9001")]
    runner.run(NOW + timedelta(seconds=30))
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.VERIFIED
    assert audit_kinds(store) == ["provider_called", "action_verified"]
    message = store.get_notification(KEY.removesuffix(":destroy") + ":action")
    assert message is not None
    assert "Destroyed" in message.notification.title
    assert provider.calls == [("destroy", "9001")]


def test_the_verification_listing_is_recorded_and_the_ledger_stops_billing_at_the_call(
    store: Store,
) -> None:
    enqueue(store)
    called_at = NOW + timedelta(minutes=10)
    runner = executor(store, ScriptedProvider())
    runner.run(called_at)
    verified_at = called_at + timedelta(seconds=30)
    runner.run(verified_at)

    (record,) = store.latest_instances(include_gone=True)
    assert record.snapshot.state is InstanceState.GONE
    assert store.latest_instances() == []
    view = store.load_fleet_view(NOW + timedelta(hours=1), timedelta(hours=1), NOW, cached=False)
    (instance,) = view.instances.values()
    assert instance.spans[-1].state is InstanceState.GONE
    assert instance.spans[-1].first_seen == verified_at
    # Billed from the listing before the call to the call the provider accepted (it bills
    # nothing from then on), not to the verification, nor an hour.
    assert total_spend(view, NOW, NOW + timedelta(hours=1)).usd == pytest.approx(0.38 * 10 / 60)


def test_the_instant_the_provider_accepted_the_call_is_recorded_on_the_action(
    store: Store,
) -> None:
    enqueue(store)
    # Something earlier in the pass (a salvage) took its time: the call went out later.
    called_at = NOW + timedelta(minutes=3)
    provider = ScriptedProvider(call_errors=[TransientError("vast: HTTP 502")])
    executor(store, provider, clock=lambda: called_at).run(NOW)
    failed = store.get_action(KEY)
    assert failed is not None
    assert (failed.status, failed.accepted_at) == (ActionStatus.PENDING, None)

    executor(store, provider, clock=lambda: called_at).run(NOW + timedelta(minutes=2))
    called = store.get_action(KEY)
    assert called is not None
    assert (called.status, called.accepted_at) == (ActionStatus.CALLED, called_at)
    (record,) = store.list_actions()
    assert record.to_record().accepted_at == called_at


def test_a_kill_repeated_after_an_escalation_records_the_repeated_call(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider(gone_after_call=False)
    runner = executor(store, provider)
    runner.run(NOW)
    first = store.get_action(KEY)
    assert first is not None
    assert first.accepted_at == NOW
    instant = NOW
    while len(provider.calls) < 2:
        instant += timedelta(minutes=1)
        runner.run(instant)
    repeated = store.get_action(KEY)
    assert repeated is not None
    assert (repeated.status, repeated.accepted_at) == (ActionStatus.UNVERIFIED, instant)


def test_only_a_verified_kill_gives_the_fleet_view_its_accepted_call(store: Store) -> None:
    enqueue(store)
    called_at = NOW + timedelta(minutes=1)
    provider = ScriptedProvider(gone_after_call=False)
    runner = executor(store, provider)
    runner.run(called_at)
    runner.run(called_at + timedelta(seconds=30))  # still listed running: unverified
    action = store.get_action(KEY)
    assert action is not None
    assert (action.status, action.accepted_at) == (ActionStatus.UNVERIFIED, called_at)
    later = NOW + timedelta(hours=1)
    view = store.load_fleet_view(later, timedelta(hours=1), NOW, cached=False)
    (instance,) = view.instances.values()
    assert instance.accepted_call is None

    provider.listing = []
    gone_at = called_at + timedelta(minutes=5)
    runner.run(gone_at)
    view = store.load_fleet_view(later, timedelta(hours=1), NOW, cached=False)
    (instance,) = view.instances.values()
    assert instance.accepted_call == AcceptedCall(ActionKind.DESTROY, called_at)
    # Listed running after that call: it did not stop the bill, the listing that saw it gone
    # did (the ledger never ends a bill before a listing that still saw it billing).
    billed = (gone_at - NOW) / timedelta(hours=1)
    assert total_spend(view, NOW, later).usd == pytest.approx(0.38 * billed)


def test_the_verification_listing_is_recorded_at_the_instant_it_was_taken(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider()
    executor(store, provider).run(NOW)
    # Something earlier in the pass (a salvage) took its time: the listing came later.
    listed_at = NOW + timedelta(minutes=5)
    executor(store, provider, clock=lambda: listed_at).run(NOW + timedelta(seconds=30))

    view = store.load_fleet_view(NOW + timedelta(hours=1), timedelta(hours=1), NOW, cached=False)
    (instance,) = view.instances.values()
    assert [(s.state, s.first_seen) for s in instance.spans] == [
        (InstanceState.RUNNING, NOW),
        (InstanceState.GONE, listed_at),
    ]


def test_status_lists_a_destroyed_instance_as_gone_right_after_its_verification(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch, NOW + timedelta(seconds=30))
    database = store.engine.url.render_as_string(hide_password=False)
    enqueue(store)
    runner = executor(store, ScriptedProvider())
    runner.run(NOW)
    (called,) = json.loads(run(capsys, "status", "--db", database, "--json").out)["instances"]
    assert (called["instance_id"], called["state"]) == ("9001", "running")

    runner.run(NOW + timedelta(seconds=30))

    (verified,) = json.loads(run(capsys, "status", "--db", database, "--json").out)["instances"]
    assert (verified["instance_id"], verified["state"]) == ("9001", "gone")
    assert verified["usd_per_hour"] == 0


def test_a_poll_listing_older_than_the_verification_recorded_after_it_changes_nothing(
    store: Store,
) -> None:
    enqueue(store)
    runner = executor(store, ScriptedProvider())
    runner.run(NOW)
    runner.run(NOW + timedelta(seconds=30))
    # The poll job (its own thread) listed before the destroy took and records only now.
    polled_at = NOW + timedelta(seconds=10)
    store.record_observation(
        AccountObservation(AccountSnapshot("vast", "vast-main", polled_at), (snapshot(),)),
        polled_at,
    )

    (record,) = store.latest_instances(include_gone=True)
    assert record.snapshot.state is InstanceState.GONE
    view = store.load_fleet_view(NOW + timedelta(hours=1), timedelta(hours=1), NOW, cached=False)
    (instance,) = view.instances.values()
    assert [(s.state, s.first_seen) for s in instance.spans] == [
        (InstanceState.RUNNING, NOW),
        (InstanceState.GONE, NOW + timedelta(seconds=30)),
    ]


@dataclass
class ListsAtItsTime(ScriptedProvider):
    """Lists each instance as observed at the listing's own instant, as the adapters do."""

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        return tuple(replace(instance, observed_at=now) for instance in self.listing)


def test_a_pass_calls_before_it_verifies_so_its_own_listing_holds_no_call(store: Store) -> None:
    enqueue(store)
    runner = executor(store, ScriptedProvider(gone_after_call=False))
    runner.run(NOW, evaluated_at=NOW)
    other = replace(snapshot(), instance_id="9002", name="other")
    store.record_observation(
        AccountObservation(AccountSnapshot("vast", "vast-main", NOW), (snapshot(), other)), NOW
    )
    second = PlannedAction(
        idempotency_key=KEY.replace("9001", "9002"),
        account="vast-main",
        instance_id="9002",
        rule="idle_gpu",
        kind=ActionKind.DESTROY,
        dry_run=False,
        reason="idle for 30 min",
        planned_at=NOW,
        episode_key=KEY.replace("9001", "9002").removesuffix(":destroy"),
        usd_per_hour_at_stake=0.38,
    )
    assert store.enqueue_action(second)
    provider = ListsAtItsTime(listing=[other], gone_after_call=False)

    # The first destroy is verified (its listing recorded) and the second called in one pass.
    executor(store, provider).run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == [("destroy", "9002")]
    assert store.get_action(KEY).status == ActionStatus.VERIFIED  # type: ignore[union-attr]


def test_monitor_mode_records_dry_run_and_never_calls_the_provider(store: Store) -> None:
    enqueue(store, dry_run=True)
    provider = ScriptedProvider()
    executor(store, provider).run(NOW)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.DRY_RUN
    assert provider.calls == []
    assert audit_kinds(store) == ["action_dry_run"]


def test_a_failed_salvage_holds_the_instance_when_the_policy_says_hold(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider()
    failing = SalvageConfig(
        command=[sys.executable, "-c", "raise SystemExit(4)"], on_failure="hold"
    )
    executor(store, provider, salvage_configs={"idle_gpu": failing}).run(NOW)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.HELD
    assert provider.calls == []
    message = store.get_notification(KEY.removesuffix(":destroy") + ":action")
    assert message is not None
    assert message.notification.severity.value == "critical"


def test_a_failed_salvage_still_destroys_when_the_policy_says_destroy(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider()
    failing = SalvageConfig(
        command=[sys.executable, "-c", "raise SystemExit(4)"], on_failure="destroy"
    )
    executor(store, provider, salvage_configs={"idle_gpu": failing}).run(NOW)
    assert provider.calls == [("destroy", "9001")]


def test_a_refused_call_is_told_at_once_retried_with_backoff_then_given_up(
    store: Store,
) -> None:
    enqueue(store)
    episode = KEY.removesuffix(":destroy")
    refusals: list[ProviderError] = [
        PermanentError("vast: 400 bad request") for _ in range(MAX_REFUSED_CALLS)
    ]
    provider = ScriptedProvider(call_errors=refusals)
    runner = executor(store, provider)
    runner.run(NOW)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.PENDING  # not final: retried with backoff
    refused = store.get_notification(f"{episode}:refused")
    assert refused is not None
    assert refused.notification.severity.value == "critical"
    assert "retried with backoff" in refused.notification.body
    assert store.get_notification(f"{episode}:action") is None
    runner.run(NOW + timedelta(seconds=1))  # backoff: not retried at once
    assert len(provider.calls) == 1
    now = NOW
    while len(provider.calls) < MAX_REFUSED_CALLS:
        action = store.get_action(KEY)
        assert action is not None
        assert action.next_attempt_at is not None
        now = action.next_attempt_at
        runner.run(now)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.FAILED
    final = store.get_notification(f"{episode}:action")
    assert final is not None
    assert final.notification.severity.value == "critical"
    assert "final" in final.notification.body
    assert "retried" not in final.notification.body
    runner.run(now + timedelta(hours=1))
    assert len(provider.calls) == MAX_REFUSED_CALLS


@dataclass
class RevokedKey(ScriptedProvider):
    """Every request is refused (HTTP 401) while ``revoked``; then it works again."""

    revoked: bool = True

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        if self.revoked:
            raise AuthError("vast: HTTP 401 (API key refused)", status_code=401)
        return super().list_instances(now)

    def _call(self, kind: str, instance_id: str) -> None:
        if self.revoked:
            self.calls.append((kind, instance_id))
            raise AuthError("vast: HTTP 401 (API key refused)", status_code=401)
        super()._call(kind, instance_id)


def test_a_call_refused_for_the_key_is_never_given_up_and_made_once_the_account_reads(
    store: Store,
) -> None:
    enqueue(store)
    episode = KEY.removesuffix(":destroy")
    provider = RevokedKey()
    runner = executor(store, provider)
    runner.run(NOW)
    refused = store.get_notification(f"{episode}:refused")
    assert refused is not None
    assert refused.notification.severity.value == "critical"
    assert "as soon as the account can be read again" in refused.notification.body
    assert "final" not in refused.notification.body
    now = NOW
    for _ in range(20):  # well past MAX_REFUSED_CALLS and the escalation delay
        action = store.get_action(KEY)
        assert action is not None
        assert action.status == ActionStatus.PENDING  # never FAILED while it bills
        assert action.next_attempt_at is not None
        assert action.next_attempt_at - now <= timedelta(minutes=2)
        now = action.next_attempt_at
        runner.run(now)
    # While the account cannot be read, the call is not repeated blindly: the listing is.
    assert provider.calls == [("destroy", "9001")]
    assert store.get_notification(f"{episode}:escalation:1") is not None
    assert store.get_notification(f"{episode}:action") is None
    provider.revoked = False  # the key works again
    action = store.get_action(KEY)
    assert action is not None
    assert action.next_attempt_at is not None
    runner.run(action.next_attempt_at)
    assert provider.calls == [("destroy", "9001"), ("destroy", "9001")]
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CALLED


def test_a_call_refused_for_the_key_stops_when_its_condition_is_gone(store: Store) -> None:
    enqueue(store)
    provider = RevokedKey()
    episodes = {KEY.removesuffix(":destroy")}
    runner = executor(store, provider, current_episodes=lambda since: episodes)
    runner.run(NOW, evaluated_at=NOW)
    episodes.clear()  # busy again (or gone): the finding is gone
    action = store.get_action(KEY)
    assert action is not None
    assert action.next_attempt_at is not None
    runner.run(action.next_attempt_at, evaluated_at=action.next_attempt_at)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CANCELLED
    assert provider.calls == [("destroy", "9001")]


def test_a_kill_is_escalated_by_time_since_the_call_while_listing_fails(store: Store) -> None:
    enqueue(store)
    episode = KEY.removesuffix(":destroy")
    provider = FailsAfterTheCall(gone_after_call=False)
    runner = executor(store, provider)
    runner.run(NOW)  # the destroy call goes out; the listing then fails for good
    assert provider.calls == [("destroy", "9001")]
    escalate_after = SafetyConfig().escalate_unverified_after
    now = NOW
    while now < NOW + escalate_after * 3:
        action = store.get_action(KEY)
        assert action is not None
        assert action.next_attempt_at is not None
        now = action.next_attempt_at
        runner.run(now)
    first = store.get_notification(f"{episode}:escalation:1")
    assert first is not None
    assert first.notification.severity.value == "critical"
    assert first.created_at - NOW <= escalate_after + timedelta(minutes=15)
    assert "listing the account fails" in first.notification.body
    later = [store.get_notification(f"{episode}:escalation:{n}") for n in (2, 3)]
    assert any(note is not None for note in later)  # and again while it lasts
    action = store.get_action(KEY)
    assert action is not None
    assert action.status in {ActionStatus.CALLED, ActionStatus.UNVERIFIED}  # never "done"


def test_a_failing_listing_leaves_no_cycle_holding_the_pass(store: Store) -> None:
    """The listing error is kept for the pass without its traceback: the traceback held the
    frame that held the pass, so each pass and its listings waited for the cyclic collector."""
    enqueue(store)
    runner = executor(store, FailsAfterTheCall(gone_after_call=False))
    runner.run(NOW)  # the destroy call goes out; verifying it then finds the listing failing
    action = store.get_action(KEY)
    assert action is not None
    assert action.next_attempt_at is not None
    later = action.next_attempt_at

    garbage = cyclic_garbage(lambda: runner.run(later))

    kept = [
        type(thing).__name__
        for thing in garbage  # type() only: the garbage holds dead weak proxies
        if issubclass(type(thing), ProviderError)
        or type(thing).__name__ == "_Pass"
        or type(thing) in (types.FrameType, types.TracebackType)
    ]
    assert kept == []
    action = store.get_action(KEY)
    assert action is not None
    assert action.last_error == "transient: vast: HTTP 500"


def test_a_transient_error_is_retried_later_not_immediately(store: Store) -> None:
    enqueue(store)
    provider = ScriptedProvider(call_errors=[TransientError("vast: 503")])
    runner = executor(store, provider)
    runner.run(NOW)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.PENDING
    assert action.next_attempt_at is not None
    assert action.next_attempt_at > NOW
    runner.run(NOW + timedelta(seconds=1))
    assert provider.calls == [("destroy", "9001")]  # not yet due
    runner.run(action.next_attempt_at)
    assert provider.calls == [("destroy", "9001"), ("destroy", "9001")]


def test_a_kill_that_does_not_take_is_escalated_and_never_marked_gone_by_a_timer(
    store: Store,
) -> None:
    enqueue(store)
    provider = ScriptedProvider(gone_after_call=False)
    runner = executor(store, provider)
    instant = NOW
    for _ in range(40):
        runner.run(instant)
        instant += timedelta(minutes=1)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.UNVERIFIED
    escalations = [
        key
        for key in ("escalation:1", "escalation:2", "escalation:3")
        if store.get_notification(KEY.removesuffix(":destroy") + ":" + key) is not None
    ]
    assert escalations[:1] == ["escalation:1"]
    assert len(provider.calls) >= 2  # the call is repeated after the escalation delay
    provider.listing = []
    runner.run(instant + timedelta(minutes=30))
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.VERIFIED


def test_a_stop_is_verified_when_the_instance_is_listed_as_stopped(store: Store) -> None:
    enqueue(store, kind=ActionKind.STOP)
    provider = ScriptedProvider(gone_after_call=False)
    runner = executor(store, provider)
    runner.run(NOW)
    provider.listing = [snapshot(InstanceState.STOPPED)]
    runner.run(NOW + timedelta(minutes=1))
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.VERIFIED
    assert provider.calls == [("stop", "9001")]


def crashed_mid_call(store: Store) -> None:
    """The crashed process claimed the action and marked the call; it may or may not have sent
    it."""
    enqueue(store)
    (_claimed,) = store.claim_actions(NOW, "crashed-process", 1)
    assert store.transition_action(
        KEY, ActionStatus.CLAIMED, ActionStatus.CLAIMED, NOW, result=CALLING
    )


def test_after_a_crash_mid_call_that_took_the_next_process_verifies_it(store: Store) -> None:
    crashed_mid_call(store)
    provider = ScriptedProvider(listing=[])
    executor(store, provider, claimer="new-process").run(NOW + timedelta(minutes=1))
    assert provider.calls == []  # never a blind second call
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.VERIFIED
    # The trail tells what is known: the call may have gone out; no "provider_called" is made up.
    assert audit_kinds(store)[-2:] == ["provider_call_interrupted", "action_verified"]


def test_after_a_crash_mid_call_an_instance_still_billing_is_called_again_at_once(
    store: Store,
) -> None:
    crashed_mid_call(store)
    provider = ScriptedProvider(listing=[snapshot()], gone_after_call=True)
    fresh = executor(store, provider, claimer="new-process")
    fresh.run(NOW + timedelta(minutes=1))
    # Verified first (still listed running), then called at once: not after the escalation.
    assert provider.calls == [("destroy", "9001")]
    assert audit_kinds(store)[-2:] == ["provider_call_interrupted", "provider_called"]
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CALLED
    assert action.next_attempt_at is not None
    fresh.run(action.next_attempt_at)
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.VERIFIED
    assert provider.calls == [("destroy", "9001")]


def test_after_a_crash_mid_call_before_any_evaluation_the_call_waits_for_one(
    store: Store,
) -> None:
    crashed_mid_call(store)
    provider = ScriptedProvider(listing=[snapshot()])
    episodes = {KEY.removesuffix(":destroy")}
    fresh = executor(store, provider, claimer="new", current_episodes=lambda since: episodes)
    fresh.run(NOW + timedelta(minutes=1))  # this process has not evaluated yet
    assert provider.calls == []
    action = store.get_action(KEY)
    assert action is not None
    assert (action.status, action.result) == (ActionStatus.UNVERIFIED, CALLING)
    later = NOW + timedelta(minutes=2)
    fresh.run(later, evaluated_at=later)
    assert provider.calls == [("destroy", "9001")]


def test_after_a_crash_mid_call_whose_condition_cleared_nothing_is_called_blindly(
    store: Store,
) -> None:
    crashed_mid_call(store)
    provider = ScriptedProvider(listing=[snapshot()])
    fresh = executor(store, provider, claimer="new", current_episodes=lambda since: set())
    at = NOW + timedelta(minutes=1)
    fresh.run(at, evaluated_at=at)  # the GPU got busy again: no finding
    assert provider.calls == []
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.UNVERIFIED  # escalated on the usual clock


@pytest.mark.parametrize("late", ["protect", "snooze"])
def test_a_protection_or_snooze_added_after_planning_cancels_the_call(
    store: Store, late: str
) -> None:
    enqueue(store)
    if late == "protect":
        store.add_protection(ProtectionKind.INSTANCE_ID, "9001", NOW, account="vast-main")
    else:
        store.add_snooze("vast-main", "9001", NOW + timedelta(hours=2), NOW)
    provider = ScriptedProvider()
    Executor(
        store,
        {"vast-main": provider},  # type: ignore[dict-item]
        SafetyConfig(),
        guard=action_guard(store, PlanContext("enforce", {}, SafetyConfig())),
    ).run(NOW)
    assert provider.calls == []
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CANCELLED
    assert "action_cancelled" in audit_kinds(store)


def test_an_unverified_kill_whose_condition_cleared_is_escalated_but_not_called_again(
    store: Store,
) -> None:
    enqueue(store)
    provider = ScriptedProvider(gone_after_call=False)
    episodes: set[str] = {KEY.removesuffix(":destroy")}
    runner = executor(store, provider, current_episodes=lambda since: episodes)
    runner.run(NOW, evaluated_at=NOW)
    assert provider.calls == [("destroy", "9001")]
    episodes.clear()  # the GPU got busy again: the idle finding is gone
    instant = NOW
    for _ in range(25):  # verification backs off; the escalation comes after 10 min
        instant += timedelta(minutes=1)
        runner.run(instant, evaluated_at=instant)
    assert provider.calls == [("destroy", "9001")]  # never a second call on a busy GPU
    escalation = store.get_notification(KEY.removesuffix(":destroy") + ":escalation:1")
    assert escalation is not None  # but the human hears that it still bills
    assert "not repeated" in escalation.notification.body


# -- the listing at the call (rules that judge listed state) ------------------------------------

PAUSED_KEY = "paused_interruptible:vast-main/9001:2026-03-02T21:50:00+00:00:destroy"


def enqueue_listed(
    store: Store, decided: InstanceSnapshot, *, rule: str = "paused_interruptible"
) -> str:
    """A destroy of ``rule`` decided on the listing ``decided`` (recorded at NOW)."""
    store.record_observation(
        AccountObservation(AccountSnapshot("vast", "vast-main", NOW), (decided,)), NOW
    )
    key = PAUSED_KEY.replace("paused_interruptible", rule)
    action = PlannedAction(
        idempotency_key=key,
        account="vast-main",
        instance_id="9001",
        rule=rule,
        kind=ActionKind.DESTROY,
        dry_run=False,
        reason="paused for 40 min",
        planned_at=NOW,
        episode_key=key.removesuffix(":destroy"),
        usd_per_hour_at_stake=0.38,
    )
    assert store.enqueue_action(action)
    return key


def test_a_paused_instance_resumed_since_its_listing_is_not_destroyed(store: Store) -> None:
    key = enqueue_listed(store, snapshot(InstanceState.PAUSED))
    provider = ScriptedProvider(listing=[snapshot(InstanceState.RUNNING)])  # resumed since
    episodes = {key.removesuffix(":destroy")}
    runner = executor(store, provider, current_episodes=lambda since: episodes)

    runner.run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == []
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.PENDING
    waits = [e for e in store.list_audit_events() if e.kind == "action_waits"]
    assert len(waits) == 1
    assert "lists it running, not paused as decided" in waits[0].message
    # The next evaluation (of a listing that shows it running) drops the finding: cancelled.
    episodes.clear()
    runner.run(NOW + timedelta(minutes=2), evaluated_at=NOW + timedelta(minutes=1, seconds=30))
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.CANCELLED
    assert provider.calls == []


def test_an_instance_still_as_decided_is_destroyed_at_once(store: Store) -> None:
    key = enqueue_listed(store, snapshot(InstanceState.PAUSED))
    provider = ScriptedProvider(listing=[snapshot(InstanceState.PAUSED)])
    runner = executor(store, provider)

    runner.run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == [("destroy", "9001")]
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.CALLED


def test_a_runtime_limit_does_not_kill_an_instance_restarted_since_its_listing(
    store: Store,
) -> None:
    started = NOW - timedelta(hours=24)
    decided = replace(snapshot(), started_at=started)
    key = enqueue_listed(store, decided, rule="max_runtime")
    # Uptime jitter (a minute) is the same run.
    same_run = replace(snapshot(), started_at=started + timedelta(minutes=1))
    assert listed_change(decided, same_run) is None
    # Started again 10 s ago: a new run.
    restarted = replace(snapshot(), started_at=NOW + timedelta(seconds=20))
    provider = ScriptedProvider(listing=[restarted])
    runner = executor(store, provider)

    runner.run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == []
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.PENDING
    assert any("started again" in e.message for e in store.list_audit_events())


def test_a_listing_that_fails_at_the_call_holds_it(store: Store) -> None:
    key = enqueue_listed(store, snapshot(InstanceState.STOPPED), rule="stopped_disk")
    provider = FailingListing(listing=[snapshot(InstanceState.STOPPED)])
    runner = executor(store, provider)

    runner.run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == []  # unknown state: no call
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.PENDING
    assert action.last_error is not None
    assert "HTTP 500" in action.last_error


def test_a_listing_recorded_after_the_latest_evaluation_waits_for_one(store: Store) -> None:
    key = enqueue_listed(store, snapshot(InstanceState.PAUSED))
    provider = ScriptedProvider(listing=[snapshot(InstanceState.PAUSED)])
    runner = executor(store, provider)

    runner.run(NOW + timedelta(seconds=5), evaluated_at=NOW - timedelta(seconds=30))

    assert provider.calls == []
    runner.run(NOW + timedelta(seconds=40), evaluated_at=NOW + timedelta(seconds=30))
    assert provider.calls == [("destroy", "9001")]
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.CALLED


def test_an_idle_destroy_is_not_sent_on_a_pod_its_user_stopped_since_the_decision(
    store: Store,
) -> None:
    # Decided on a running instance; its user stopped it a second before the call. The call
    # goes out only on the state a fresh listing shows: the action waits for the planner.
    enqueue(store)  # idle_gpu, decided on a running instance
    provider = ScriptedProvider(listing=[snapshot(InstanceState.STOPPED)])
    episodes = {KEY.removesuffix(":destroy")}
    runner = executor(store, provider, current_episodes=lambda since: episodes)

    runner.run(NOW + timedelta(seconds=1), evaluated_at=NOW)

    assert provider.calls == []
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.PENDING
    assert any(
        "lists it stopped, not running as decided" in event.message
        for event in store.list_audit_events()
    )
    # The next evaluation (of the new listing) no longer holds the finding: cancelled.
    episodes.clear()
    runner.run(NOW + timedelta(seconds=61), evaluated_at=NOW + timedelta(seconds=60))
    assert provider.calls == []
    action = store.get_action(KEY)
    assert action is not None
    assert action.status == ActionStatus.CANCELLED


def test_a_budget_destroy_is_listed_again_before_the_call(store: Store) -> None:
    key = enqueue_listed(store, snapshot(InstanceState.RUNNING), rule="budget")
    provider = ScriptedProvider(listing=[snapshot(InstanceState.STOPPED)])
    runner = executor(store, provider)

    runner.run(NOW + timedelta(seconds=30), evaluated_at=NOW)

    assert provider.calls == []
    action = store.get_action(key)
    assert action is not None
    assert action.status == ActionStatus.PENDING


def test_a_wait_that_drags_on_is_escalated_and_still_not_called(store: Store) -> None:
    # The listing keeps disagreeing with the one decided on (a flapping state), and every
    # evaluation keeps the finding: the call is never made, and the human hears of it.
    key = enqueue_listed(store, snapshot(InstanceState.PAUSED))
    provider = ScriptedProvider(listing=[snapshot(InstanceState.RUNNING)])
    episodes = {key.removesuffix(":destroy")}
    runner = executor(store, provider, current_episodes=lambda since: episodes)
    instant = NOW
    for _ in range(24):
        instant += timedelta(seconds=30)
        runner.run(instant, evaluated_at=instant)

    assert provider.calls == []
    escalation = store.get_notification(key.removesuffix(":destroy") + ":escalation:1")
    assert escalation is not None
    assert "has not been called" in escalation.notification.body
    assert "lists it running, not paused as decided" in escalation.notification.body
