from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support import pricey_rule
from watchdog_gpu.config import load_settings
from watchdog_gpu.fleet import (
    AccountView,
    ActionRecord,
    FleetView,
    FuseState,
    InstanceView,
    Protection,
    ProtectionKind,
    Snooze,
)
from watchdog_gpu.model import (
    ActionKind,
    ActionStatus,
    Finding,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    PlanStatus,
    Severity,
    StateSpan,
    Verdict,
)
from watchdog_gpu.plan import Plan, PlanContext, action_key
from watchdog_gpu.plan import plan as plan_unwarned
from watchdog_gpu.rules import registry
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.low_balance import LowBalanceConfig
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig
from watchdog_gpu.rules.paused_interruptible import PausedInterruptibleConfig
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.wiring import plan_context

NOW = datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
EPISODE = NOW - timedelta(minutes=30)


def instance(
    instance_id: str = "9001",
    *,
    account: str = "vast-main",
    name: str = "train",
    state: InstanceState = InstanceState.RUNNING,
) -> InstanceView:
    snapshot = InstanceSnapshot(
        provider="vast",
        account=account,
        instance_id=instance_id,
        name=name,
        state=state,
        raw_state=state.value,
        observed_at=NOW,
        compute_usd_per_hour=0.37,
        storage_usd_per_hour=0.01,
    )
    span = StateSpan(state, state.value, NOW - timedelta(hours=3), NOW, 0.37, 0.01)
    return InstanceView(latest=snapshot, first_seen=NOW - timedelta(hours=3), spans=(span,))


def fleet(*views: InstanceView, **kwargs: object) -> FleetView:
    return FleetView(
        now=NOW,
        instances={view.latest.ref.key: view for view in views},
        **kwargs,  # type: ignore[arg-type]
    )


def finding(
    instance_id: str = "9001",
    *,
    rule: str = "idle_gpu",
    account: str = "vast-main",
    due_at: datetime = NOW,
    action: ActionKind = ActionKind.DESTROY,
) -> Finding:
    return Finding(
        rule=rule,
        account=account,
        instance_id=instance_id,
        severity=Severity.WARNING,
        action=action,
        summary="idle for 30 min",
        episode_started_at=EPISODE,
        due_at=due_at,
    )


def context(
    mode: str = "enforce",
    *,
    safety: SafetyConfig | None = None,
    idle: IdleGpuConfig | None = None,
    protected_accounts: frozenset[str] = frozenset(),
    fuse_latched: bool = False,
) -> PlanContext:
    return PlanContext(
        mode=mode,  # type: ignore[arg-type]
        rules={
            "idle_gpu": idle or IdleGpuConfig(),
            "budget": BudgetConfig(),
            "low_balance": LowBalanceConfig(),
        },
        safety=safety or SafetyConfig(),
        protected_accounts=protected_accounts,
        fuse_latched=fuse_latched,
    )


def warned(
    findings: Sequence[Finding], at: datetime = NOW - timedelta(hours=1)
) -> dict[str, datetime]:
    """Notice times of a warning for each finding, sent at ``at`` and never withdrawn."""
    return {f"{f.episode_key}:warning": at for f in findings}


def plan(findings: Sequence[Finding], view: FleetView, now: datetime, ctx: PlanContext) -> Plan:
    """The planner, with a standing warning for every finding unless the view records some."""
    if not view.notice_times:
        times = warned(findings)
        view = replace(view, notice_times=times, notification_keys=frozenset(times))
    return plan_unwarned(findings, view, now, ctx)


def statuses(decisions: Sequence[object]) -> list[PlanStatus]:
    return [d.status for d in decisions]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("due_in", "expected"),
    [
        (timedelta(minutes=11), PlanStatus.WAIT),
        (timedelta(minutes=10), PlanStatus.WARN),
        (timedelta(minutes=1), PlanStatus.WARN),
        (timedelta(0), PlanStatus.EXECUTE),
        (timedelta(minutes=-5), PlanStatus.EXECUTE),
    ],
)
def test_a_destructive_finding_waits_then_warns_then_executes_at_its_due_time(
    due_in: timedelta, expected: PlanStatus
) -> None:
    result = plan([finding(due_at=NOW + due_in)], fleet(instance()), NOW, context())
    assert statuses(result.decisions) == [expected]
    if expected is PlanStatus.EXECUTE:
        (action,) = result.actions
        assert action.kind is ActionKind.DESTROY
        assert action.dry_run is False
        assert action.idempotency_key == action_key(finding(), ActionKind.DESTROY)
    else:
        assert result.actions == ()


def test_monitor_mode_decides_the_same_but_marks_the_action_dry_run() -> None:
    result = plan([finding()], fleet(instance()), NOW, context("monitor"))
    (action,) = result.actions
    assert action.dry_run is True


def test_a_rule_in_enforce_mode_acts_even_when_the_global_mode_is_monitor() -> None:
    ctx = context("monitor", idle=IdleGpuConfig(mode="enforce"))
    (action,) = plan([finding()], fleet(instance()), NOW, ctx).actions
    assert action.dry_run is False


def test_a_rule_in_monitor_mode_stays_dry_run_when_the_global_mode_is_enforce() -> None:
    ctx = context("enforce", idle=IdleGpuConfig(mode="monitor"))
    (action,) = plan([finding()], fleet(instance()), NOW, ctx).actions
    assert action.dry_run is True


@pytest.mark.parametrize(
    ("view_kwargs", "ctx_kwargs", "name"),
    [
        ({"protections": (Protection(ProtectionKind.INSTANCE_ID, "9001"),)}, {}, "train"),
        ({"protections": (Protection(ProtectionKind.NAME_GLOB, "*keep*"),)}, {}, "KEEP-me"),
        ({"protections": (Protection(ProtectionKind.ACCOUNT, "vast-main"),)}, {}, "train"),
        ({}, {"safety": SafetyConfig(protect_ids=["vast-main/9001"])}, "train"),
        ({}, {"safety": SafetyConfig(protect_names=["*keep*"])}, "run-keep-1"),
        ({}, {"safety": SafetyConfig(protect_accounts=["vast-main"])}, "train"),
        ({}, {"protected_accounts": frozenset({"vast-main"})}, "train"),
    ],
)
def test_a_protected_instance_is_never_acted_on(
    view_kwargs: dict[str, object], ctx_kwargs: dict[str, object], name: str
) -> None:
    view = fleet(instance(name=name), **view_kwargs)
    result = plan([finding()], view, NOW, context(**ctx_kwargs))  # type: ignore[arg-type]
    assert statuses(result.decisions) == [PlanStatus.PROTECTED]
    assert result.actions == ()


def test_a_protection_for_another_account_does_not_protect() -> None:
    protection = Protection(ProtectionKind.INSTANCE_ID, "9001", account="runpod-main")
    result = plan([finding()], fleet(instance(), protections=(protection,)), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.EXECUTE]


def test_the_budget_rule_also_spares_protected_instances() -> None:
    view = fleet(instance(name="keep-this"))
    ctx = context(safety=SafetyConfig(protect_names=["keep-*"]))
    result = plan([finding(rule="budget")], view, NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.PROTECTED]


def test_an_action_already_in_the_outbox_is_not_planned_twice() -> None:
    record = ActionRecord(
        idempotency_key=action_key(finding(), ActionKind.DESTROY),
        account="vast-main",
        instance_id="9001",
        rule="idle_gpu",
        kind=ActionKind.DESTROY,
        status=ActionStatus.UNVERIFIED,
        dry_run=False,
        created_at=NOW - timedelta(minutes=1),
        episode_key=finding().episode_key,
    )
    result = plan([finding()], fleet(instance(), recent_actions=(record,)), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.IN_PROGRESS]
    assert result.actions == ()


def test_an_active_snooze_postpones_and_an_expired_one_does_not() -> None:
    active = Snooze("vast-main", "9001", NOW + timedelta(hours=1), NOW - timedelta(minutes=5))
    expired = Snooze("vast-main", "9001", NOW - timedelta(seconds=1), NOW - timedelta(hours=2))
    snoozed = plan([finding()], fleet(instance(), snoozes=(active,)), NOW, context())
    assert statuses(snoozed.decisions) == [PlanStatus.SNOOZED]
    released = plan([finding()], fleet(instance(), snoozes=(expired,)), NOW, context())
    assert statuses(released.decisions) == [PlanStatus.EXECUTE]


def test_notify_only_findings_never_become_actions() -> None:
    alert = finding(rule="low_balance", action=ActionKind.NOTIFY)
    result = plan([alert], fleet(instance()), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.NOTIFY]
    assert result.actions == ()


def test_a_finding_for_a_gone_instance_is_not_acted_on() -> None:
    result = plan([finding()], fleet(instance(state=InstanceState.GONE)), NOW, context())
    assert result.actions == ()


def test_rate_limits_defer_actions_beyond_the_per_tick_limit_without_tripping() -> None:
    views = [instance(str(i)) for i in range(10)]
    findings = [finding(str(i), due_at=NOW - timedelta(minutes=i)) for i in range(5)]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=3))
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.DEFERRED] * 2 + [PlanStatus.EXECUTE] * 3
    assert [a.instance_id for a in result.deferred] == ["0", "1"]  # the oldest due go first
    assert not result.fuse_tripped
    assert result.blocked == ()
    assert result.announce_deferral
    assert "3 per tick" in result.deferral_reason


def costing(f: Finding, usd_per_hour: float) -> Finding:
    return replace(f, usd_per_hour_at_stake=usd_per_hour)


def test_a_wave_due_seconds_apart_lets_the_costliest_go_first() -> None:
    # Wakes decide warnings seconds apart, so a wave's due times differ by seconds: they count
    # as equal, and the dearest go first (the old order let the earliest due go, the cheap ones).
    rates = [0.35, 0.62, 1.10, 2.40, 0.48, 0.35, 0.62, 2.40]
    views = [instance(str(i)) for i in range(len(rates))]
    findings = [
        costing(finding(str(i), due_at=NOW - timedelta(seconds=40 - 2 * i)), rate)
        for i, rate in enumerate(rates)
    ]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=3))
    result = plan(findings, fleet(*views), NOW, ctx)
    assert sorted(a.instance_id for a in result.actions) == ["2", "3", "7"]
    assert len(result.deferred) == 5


def test_an_action_overdue_an_hour_longer_goes_before_a_costlier_fresh_one() -> None:
    # Cost alone would let a stream of dearer actions hold a cheap deferral back for ever: one
    # overdue a whole hour longer goes first. Less than that, the dearer one does (a tick older
    # is not enough: a wave straddling a tick would keep its late part waiting for hours).
    views = [instance(str(i)) for i in range(3)]
    fresh = costing(finding("0", due_at=NOW - timedelta(seconds=10)), 2.40)
    a_tick_older = costing(finding("1", due_at=NOW - timedelta(minutes=1, seconds=10)), 0.35)
    an_hour_older = costing(finding("2", due_at=NOW - timedelta(hours=1, seconds=10)), 0.35)
    findings = [fresh, a_tick_older, an_hour_older]
    times = warned(findings, at=NOW - timedelta(hours=3))
    view = fleet(*views, notice_times=times, notification_keys=frozenset(times))
    ctx = context(safety=SafetyConfig(max_actions_per_tick=1))
    first = plan([fresh, a_tick_older], view, NOW, ctx)
    assert [a.instance_id for a in first.actions] == ["0"]
    second = plan(findings, view, NOW, ctx)
    assert [a.instance_id for a in second.actions] == ["2"]


def test_a_wake_keeps_its_allowance_for_a_dearer_action_due_before_the_next_tick() -> None:
    tick = NOW - timedelta(seconds=20)
    views = [instance(str(i)) for i in range(4)]
    cheap_due = costing(finding("0", due_at=NOW - timedelta(seconds=5)), 0.35)
    dear_soon = costing(finding("1", due_at=NOW + timedelta(seconds=30)), 2.40)
    dear_later = costing(finding("2", due_at=NOW + timedelta(seconds=50)), 2.40)  # after the tick
    findings = [cheap_due, dear_soon, dear_later]
    times = warned(findings)
    view = fleet(*views, notice_times=times, notification_keys=frozenset(times))
    one = context(safety=SafetyConfig(max_actions_per_tick=1))
    two = context(safety=SafetyConfig(max_actions_per_tick=2))

    woken = plan_unwarned(findings, view, NOW, one, tick_started=tick)
    assert statuses(woken.decisions) == [PlanStatus.DEFERRED, PlanStatus.WARN, PlanStatus.WARN]
    # Room for both, or a dearer one due only after the next tick: the wake acts.
    assert [
        a.instance_id for a in plan_unwarned(findings, view, NOW, two, tick_started=tick).actions
    ] == ["0"]
    past_tick = [cheap_due, dear_later]
    assert [
        a.instance_id for a in plan_unwarned(past_tick, view, NOW, one, tick_started=tick).actions
    ] == ["0"]
    # A tick keeps nothing back: no wake may come to use it before the next tick.
    assert [a.instance_id for a in plan_unwarned(findings, view, NOW, one).actions] == ["0"]


def test_a_wake_lets_an_hour_old_deferral_go_before_a_dearer_action_due_soon() -> None:
    tick = NOW - timedelta(seconds=20)
    views = [instance(str(i)) for i in range(2)]
    old = costing(finding("0", due_at=NOW - timedelta(hours=1, minutes=1)), 0.35)
    dear_soon = costing(finding("1", due_at=NOW + timedelta(seconds=30)), 2.40)
    times = warned([old, dear_soon])
    view = fleet(*views, notice_times=times, notification_keys=frozenset(times))
    ctx = context(safety=SafetyConfig(max_actions_per_tick=1))
    woken = plan_unwarned([old, dear_soon], view, NOW, ctx, tick_started=tick)
    assert [a.instance_id for a in woken.actions] == ["0"]


def test_a_continuing_deferral_wave_is_announced_once() -> None:
    views = [instance(str(i)) for i in range(10)]
    findings = [finding(str(i)) for i in range(5)]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=3))
    last_tick = FuseState(last_deferred_at=NOW - timedelta(minutes=1))
    result = plan(findings, fleet(*views, fuse=last_tick), NOW, ctx)
    assert len(result.deferred) == 2
    assert not result.announce_deferral
    long_ago = FuseState(last_deferred_at=NOW - timedelta(hours=1))
    assert plan(findings, fleet(*views, fuse=long_ago), NOW, ctx).announce_deferral


def test_the_fuse_counts_actions_of_the_last_hour_but_not_dry_runs_or_the_budget() -> None:
    def record(i: int, *, dry_run: bool = False, rule: str = "idle_gpu") -> ActionRecord:
        return ActionRecord(
            f"old-{i}-{dry_run}-{rule}",
            "vast-main",
            f"old{i}",
            rule,
            ActionKind.DESTROY,
            ActionStatus.DRY_RUN if dry_run else ActionStatus.VERIFIED,
            dry_run,
            NOW - timedelta(minutes=30),
            f"episode-{i}",
        )

    done = (
        *(record(i) for i in range(9)),
        *(record(i, dry_run=True) for i in range(20)),
        *(record(i, rule="budget") for i in range(20)),
    )
    views = [instance(str(i)) for i in range(10)]
    result = plan([finding("1"), finding("2")], fleet(*views, recent_actions=done), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.EXECUTE, PlanStatus.DEFERRED]
    assert not result.fuse_tripped


def test_dry_runs_never_count_towards_the_fuse_and_are_never_held() -> None:
    views = [instance(str(i)) for i in range(4)]
    findings = [finding(str(i)) for i in range(4)]
    ctx = context("monitor", safety=SafetyConfig(max_actions_per_tick=1), fuse_latched=True)
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.EXECUTE] * 4
    assert not result.fuse_tripped
    assert result.deferred == result.blocked == ()


def test_a_wave_of_idle_instances_is_not_a_runaway_policy() -> None:
    views = [instance(str(i)) for i in range(4)]
    findings = [finding(str(i)) for i in range(4)]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=10, max_fleet_fraction=0.5))
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.EXECUTE] * 4
    assert not result.fuse_tripped


def test_time_based_rules_acting_on_most_of_the_fleet_in_one_tick_trip_the_fuse() -> None:
    views = [instance(str(i)) for i in range(4)]
    findings = [finding(str(i), rule="max_runtime") for i in range(3)]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=10, max_fleet_fraction=0.5))
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.BLOCKED] * 3
    assert result.fuse_tripped
    assert "billing fleet of 4" in result.fuse_reason


def test_an_idle_rule_firing_on_a_gpu_busy_a_tick_ago_trips_the_fuse() -> None:
    busy = GpuSample(
        account="vast-main",
        instance_id="1",
        gpu_index=0,
        at=NOW - timedelta(minutes=1),
        verdict=Verdict.BUSY,
    )
    views = [replace(instance("1"), samples=(busy,)), instance("2")]
    result = plan([finding("1"), finding("2")], fleet(*views), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.BLOCKED, PlanStatus.BLOCKED]
    assert result.fuse_tripped
    assert "vast-main/1" in result.fuse_reason


def test_two_forgotten_instances_of_a_two_instance_fleet_are_not_a_runaway() -> None:
    result = plan([finding("1"), finding("2")], fleet(instance("1"), instance("2")), NOW, context())
    assert statuses(result.decisions) == [PlanStatus.EXECUTE, PlanStatus.EXECUTE]
    assert not result.fuse_tripped


@pytest.mark.parametrize("recorded", [True, False])
def test_a_latched_fuse_blocks_ordinary_actions_but_not_the_budget_emergency(
    recorded: bool,
) -> None:
    views = [instance("1"), instance("2")]
    findings = [finding("1"), finding("2", rule="budget")]
    view = fleet(*views, fuse=FuseState(latched=recorded))
    result = plan(findings, view, NOW, context(fuse_latched=not recorded))
    assert statuses(result.decisions) == [PlanStatus.BLOCKED, PlanStatus.EXECUTE]
    assert not result.fuse_tripped  # already latched: no second trip alert


def test_the_budget_emergency_has_its_own_limit() -> None:
    views = [instance(str(i)) for i in range(6)]
    findings = [finding(str(i), rule="budget") for i in range(6)]
    ctx = context(
        safety=SafetyConfig(max_actions_per_tick=1, budget_emergency_max_actions_per_tick=5)
    )
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions).count(PlanStatus.EXECUTE) == 5
    assert statuses(result.decisions).count(PlanStatus.DEFERRED) == 1
    assert not result.fuse_tripped


def test_the_idle_and_emergency_rules_are_the_registrys() -> None:
    assert registry.idle_rules() == {"idle_gpu"}
    assert registry.emergency_rules() == {"budget"}


def test_a_rule_registered_as_observing_idle_is_contradicted_by_a_busy_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rule = replace(pricey_rule.RULE, observes_idle=True)
    monkeypatch.setitem(registry.RULES, pricey_rule.NAME, rule)
    busy = GpuSample(
        account="vast-main",
        instance_id="1",
        gpu_index=0,
        at=NOW - timedelta(minutes=1),
        verdict=Verdict.BUSY,
    )
    view = fleet(replace(instance("1"), samples=(busy,)))
    result = plan([finding("1", rule=pricey_rule.NAME)], view, NOW, context())
    assert statuses(result.decisions) == [PlanStatus.BLOCKED]
    assert result.fuse_tripped


def test_a_rule_registered_as_an_emergency_has_the_budget_emergencys_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(registry.RULES, pricey_rule.NAME, replace(pricey_rule.RULE, emergency=True))
    views = [instance(str(i)) for i in range(3)]
    findings = [finding(str(i), rule=pricey_rule.NAME) for i in range(3)]  # 1 per tick otherwise
    ctx = context(
        safety=SafetyConfig(max_actions_per_tick=1, budget_emergency_max_actions_per_tick=2)
    )
    result = plan(findings, fleet(*views), NOW, ctx)
    assert statuses(result.decisions).count(PlanStatus.EXECUTE) == 2
    assert statuses(result.decisions).count(PlanStatus.DEFERRED) == 1


def test_a_due_action_without_a_warning_is_warned_first_and_acted_on_a_full_lead_later() -> None:
    view = fleet(instance())
    result = plan_unwarned([finding(due_at=NOW - timedelta(hours=2))], view, NOW, context())
    (decision,) = result.decisions
    assert decision.status is PlanStatus.WARN
    assert decision.warning_key == f"{finding().episode_key}:warning"
    assert decision.due_at == NOW + IdleGpuConfig().warn_before


def test_a_warning_younger_than_warn_before_postpones_the_action() -> None:
    sent = NOW - timedelta(minutes=4)
    times = warned([finding()], at=sent)
    view = fleet(instance(), notice_times=times, notification_keys=frozenset(times))
    (decision,) = plan_unwarned([finding(due_at=NOW)], view, NOW, context()).decisions
    assert decision.status is PlanStatus.WARN
    assert decision.warning_key is None  # it stands: no second message
    assert decision.due_at == sent + IdleGpuConfig().warn_before


def test_a_withdrawn_warning_restarts_the_clock_with_a_new_warning() -> None:
    episode = finding().episode_key
    times = {
        f"{episode}:warning": NOW - timedelta(hours=3),
        f"{episode}:resolution": NOW - timedelta(hours=2),
    }
    view = fleet(instance(), notice_times=times, notification_keys=frozenset(times))
    (decision,) = plan_unwarned([finding(due_at=NOW)], view, NOW, context()).decisions
    assert decision.status is PlanStatus.WARN
    assert decision.warning_key == f"{episode}:warning:{int(NOW.timestamp())}"
    assert decision.due_at == NOW + IdleGpuConfig().warn_before


def test_a_rule_without_grace_needs_no_warning() -> None:
    ctx = replace(context(), rules={**context().rules, "budget": BudgetConfig(skip_grace=True)})
    result = plan_unwarned([finding(rule="budget")], fleet(instance()), NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.EXECUTE]


def test_switching_to_enforce_mid_episode_acts_despite_the_earlier_dry_run() -> None:
    dry = ActionRecord(
        idempotency_key=action_key(finding(), ActionKind.DESTROY, dry_run=True),
        account="vast-main",
        instance_id="9001",
        rule="idle_gpu",
        kind=ActionKind.DESTROY,
        status=ActionStatus.DRY_RUN,
        dry_run=True,
        created_at=NOW - timedelta(minutes=5),
        episode_key=finding().episode_key,
    )
    view = fleet(instance(), recent_actions=(dry,))
    assert statuses(plan([finding()], view, NOW, context("monitor")).decisions) == [
        PlanStatus.IN_PROGRESS
    ]
    (action,) = plan([finding()], view, NOW, context("enforce")).actions
    assert action.dry_run is False
    assert action.idempotency_key == action_key(finding(), ActionKind.DESTROY)


def test_a_due_action_waits_while_the_accounts_last_listing_failed() -> None:
    failed = AccountView(
        "vast-main",
        "vast",
        None,
        last_poll_ok_at=NOW - timedelta(minutes=20),
        last_poll_error_kind="transient",
        last_poll_error_at=NOW,
    )
    listed = replace(
        failed, last_poll_ok_at=NOW, last_poll_error_kind=None, last_poll_error_at=None
    )

    stale = plan([finding()], fleet(instance(), accounts={"vast-main": failed}), NOW, context())
    fresh = plan([finding()], fleet(instance(), accounts={"vast-main": listed}), NOW, context())

    assert statuses(stale.decisions) == [PlanStatus.WAIT]
    assert stale.actions == ()
    assert "stale" in stale.decisions[0].note
    assert statuses(fresh.decisions) == [PlanStatus.EXECUTE]


def test_a_wake_shares_the_per_tick_allowance_of_the_tick_before_it() -> None:
    def record(i: int, created: datetime) -> ActionRecord:
        return ActionRecord(
            f"tick-{i}", "vast-main", f"t{i}", "idle_gpu", ActionKind.DESTROY,
            ActionStatus.CALLED, False, created, f"episode-{i}",
        )  # fmt: skip

    tick = NOW - timedelta(seconds=20)
    views = [instance(str(i)) for i in range(6)]
    findings = [finding(str(i)) for i in range(4)]
    ctx = context(safety=SafetyConfig(max_actions_per_tick=3))
    acted = fleet(*views, recent_actions=(record(0, tick), record(1, tick)))
    ticked = plan(findings, acted, NOW, ctx)
    assert statuses(ticked.decisions).count(PlanStatus.EXECUTE) == 3  # a tick: its own allowance
    shared = plan_unwarned(
        findings,
        replace(acted, notice_times=warned(findings), notification_keys=frozenset()),
        NOW,
        ctx,
        tick_started=tick,
    )
    assert statuses(shared.decisions).count(PlanStatus.EXECUTE) == 1  # 3 - the tick's 2
    assert len(shared.deferred) == 3


def test_the_plan_says_when_an_idle_decision_changes_by_time_alone() -> None:
    sent = NOW - timedelta(minutes=4)
    warned_one, due_later, other_rule = finding("1"), finding("2"), finding("3", rule="budget")
    times = {**warned([warned_one], at=sent), **warned([due_later], at=NOW - timedelta(hours=1))}
    view = fleet(
        instance("1"), instance("2"), instance("3"),
        notice_times=times, notification_keys=frozenset(times),
    )  # fmt: skip
    result = plan_unwarned(
        [warned_one, replace(due_later, due_at=NOW + timedelta(minutes=8)), other_rule],
        view,
        NOW,
        context(),
    )
    assert statuses(result.decisions)[:2] == [PlanStatus.WARN, PlanStatus.WARN]
    # The warning of "1" went out 4 min ago: due 6 min from now, before "2"'s 8 min.
    assert result.next_due(NOW) == sent + IdleGpuConfig().warn_before
    assert result.next_due(NOW + timedelta(minutes=7)) == NOW + timedelta(minutes=8)
    assert result.next_due(NOW + timedelta(minutes=9)) is None


def test_the_shell_gives_the_fuse_the_evaluation_interval(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[watchdog]\npoll_interval = "90s"\n', encoding="utf-8")
    assert plan_context(load_settings(config, {})).tick_interval == timedelta(seconds=90)


@pytest.mark.parametrize("rule", ["max_runtime", "stopped_disk", "paused_interruptible", "budget"])
def test_a_wake_acts_on_listed_state_only_when_it_was_listed_after_the_due_time(rule: str) -> None:
    # A wake polls no provider: a rule judging by listed state waits for a listing at or after
    # its due time (the owner may have restarted or resumed the instance since the last one).
    tick = NOW - timedelta(seconds=30)
    due = NOW - timedelta(seconds=10)

    def listed(at: datetime) -> AccountView:
        return AccountView("vast-main", "vast", None, last_poll_ok_at=at)

    ctx = context(safety=SafetyConfig(max_actions_per_tick=5))
    found = finding(rule=rule, due_at=due)
    times = warned([found])
    decided: dict[str, Plan] = {}
    for name, at in (("before", tick), ("at", due), ("after", NOW)):
        view = fleet(
            instance(),
            accounts={"vast-main": listed(at)},
            notice_times=times,
            notification_keys=frozenset(times),
        )
        decided[name] = plan_unwarned([found], view, NOW, ctx, tick_started=tick)
    assert statuses(decided["before"].decisions) == [PlanStatus.WAIT]
    assert "waiting for a listing after it" in decided["before"].decisions[0].note
    assert statuses(decided["at"].decisions) == [PlanStatus.EXECUTE]
    assert statuses(decided["after"].decisions) == [PlanStatus.EXECUTE]
    # A tick acts on its own listing as before; an idle limit at a wake on its streamed rows.
    tick_view = fleet(instance(), accounts={"vast-main": listed(tick)}, notice_times=times)
    assert statuses(plan_unwarned([found], tick_view, NOW, ctx).decisions) == [PlanStatus.EXECUTE]
    idle = finding(due_at=due)
    idle_times = warned([idle])
    idle_view = replace(tick_view, notice_times=idle_times)
    woken = plan_unwarned([idle], idle_view, NOW, ctx, tick_started=tick)
    assert statuses(woken.decisions) == [PlanStatus.EXECUTE]


def test_the_plan_says_when_a_decision_on_listed_state_changes_by_time_alone() -> None:
    # The idle rule's instants are next_due's (the rows); the others' next_listed_due's.
    paused = finding("1", rule="paused_interruptible", due_at=NOW + timedelta(minutes=25))
    ttl = finding("2", rule="max_runtime", due_at=NOW + timedelta(minutes=4))
    idle = finding("3", due_at=NOW + timedelta(minutes=2))
    times = warned([ttl, idle])
    view = fleet(
        instance("1"), instance("2"), instance("3"),
        notice_times=times, notification_keys=frozenset(times),
    )  # fmt: skip
    base = context()
    ten = timedelta(minutes=10)
    ctx = replace(
        base,
        rules={
            **base.rules,
            "max_runtime": MaxRuntimeConfig(limit=timedelta(hours=2), warn_before=ten),
            "paused_interruptible": PausedInterruptibleConfig(warn_before=ten),
        },
    )
    result = plan_unwarned([paused, ttl, idle], view, NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.WAIT, PlanStatus.WARN, PlanStatus.WARN]
    assert result.next_due(NOW) == NOW + timedelta(minutes=2)
    assert result.next_listed_due(NOW) == NOW + timedelta(minutes=4)  # the TTL's due time
    # Then the paused instance's warning point (25 min - warn_before 10 min).
    assert result.next_listed_due(NOW + timedelta(minutes=5)) == NOW + timedelta(minutes=15)
    only_idle = plan_unwarned([idle], view, NOW, ctx)
    assert only_idle.next_listed_due(NOW) is None


def test_a_name_glob_matching_every_name_protects_unnamed_instances_too() -> None:
    # protect_names = ["*"] promises "every instance": an instance without a name is one.
    view = fleet(instance(name=""))
    ctx = context(safety=SafetyConfig(protect_names=["*"]))
    result = plan([finding()], view, NOW, ctx)
    assert statuses(result.decisions) == [PlanStatus.PROTECTED]
    # A glob that needs some text still leaves the unnamed instance unprotected.
    ctx = context(safety=SafetyConfig(protect_names=["*keep*"]))
    assert statuses(plan([finding()], view, NOW, ctx).decisions) == [PlanStatus.EXECUTE]
