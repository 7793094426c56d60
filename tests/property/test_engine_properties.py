"""Property-based tests of the whole engine: a hypothesis state machine over random fleets.

The machine drives the real :class:`~watchdog_gpu.tick.Watchdog` — rules, episode stitching,
planner, store (a real migrated SQLite file), executor, delivery — with a virtual clock, an
in-memory provider account and an in-memory prober. Between ticks it launches instances
(some protected by name), makes GPUs busy or idle, blinds probes, breaks the provider's API
(listings and calls fail) and restarts the daemon. After every run of ticks it checks the promises:

- never a destroy of an instance whose GPU was busy in its idle window;
- never a destroy without a standing warning (sent ``warn_before`` ahead, not withdrawn since);
- never more actions than the fuse allows per tick and in any rolling hour;
- a protected instance is never acted on;
- under a budget, once the world spent past the ceiling by the last tick, a tick whose listing
  works leaves no unprotected instance billing (overshoot at most one tick; the fake provider
  destroys at once).

World model: a GPU's busy/idle state changes only at tick instants and only while the instance
is observed (a state that changed while nobody could see it is unknowable, and the watchdog
treats blind time as blind — never as idle). The default example count is modest; the ``slow``
test runs many more.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from tests.support.databases import copy_migrated_sqlite
from watchdog_gpu.config import Settings, load_settings
from watchdog_gpu.errors import TransientError
from watchdog_gpu.executor import Executor
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionStatus,
    GpuSample,
    InstanceRef,
    InstanceSnapshot,
    InstanceState,
    PlannedNotification,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Verdict,
)
from watchdog_gpu.notices import WARNING, ActionKey, NoticeKey
from watchdog_gpu.notify.delivery import DeliveryResult
from watchdog_gpu.store import Store, create_engine_for
from watchdog_gpu.store.engine import sqlite_url
from watchdog_gpu.tick import Watchdog
from watchdog_gpu.wiring import action_guard, plan_context, tick_settings

ACCOUNT = "prop"
START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
TICK = timedelta(seconds=60)
IDLE = timedelta(minutes=10)
WARN_BEFORE = timedelta(minutes=3)
PER_TICK, PER_HOUR = 2, 4
HOUR = timedelta(hours=1)
RATE = 0.51  # $/h of every instance: compute + storage
DAILY_USD = 2.0
CONFIG = f"""
[watchdog]
mode = "enforce"
poll_interval = "60s"
probe_interval = "60s"

[rules.idle_gpu]
idle = "{int(IDLE.total_seconds() // 60)}m"
arm_after = "5m"
warn_before = "{int(WARN_BEFORE.total_seconds() // 60)}m"

[safety]
max_actions_per_tick = {PER_TICK}
max_actions_per_hour = {PER_HOUR}
protect_names = ["keep-*"]
verify_interval = "30s"
"""


@dataclass
class FakeInstance:
    instance_id: str
    name: str
    busy: bool
    blind: bool = False
    gone: bool = False
    busy_at: list[datetime] = field(default_factory=list)  # tick instants it was busy
    billing: bool = False  # seen by a tick: bills from then on until gone
    started_at: datetime | None = (
        None  # since when it bills, what the listing dates (Vast.ai's uptime)
    )

    @property
    def protected(self) -> bool:
        return self.name.startswith("keep-")


@dataclass
class FakeAccount:
    """The provider: lists the instances, destroys them at once; ``down`` breaks every call."""

    instances: dict[str, FakeInstance] = field(default_factory=dict)
    down: bool = False
    calls: list[tuple[datetime, str]] = field(default_factory=list)  # (when, instance id)
    now: datetime = START

    account: str = ACCOUNT
    name: str = "vast"
    supports_stop: bool = True

    def snapshot(self, instance: FakeInstance, now: datetime) -> InstanceSnapshot:
        return InstanceSnapshot(
            provider="vast",
            account=ACCOUNT,
            instance_id=instance.instance_id,
            name=instance.name,
            state=InstanceState.RUNNING,
            raw_state="running",
            observed_at=now,
            compute_usd_per_hour=RATE - 0.01,
            storage_usd_per_hour=0.01,
            gpu_count=1,
            ssh_host="127.0.0.1",
            ssh_port=22000,
            ssh_user="root",
            started_at=instance.started_at,
        )

    def _check(self) -> None:
        if self.down:
            raise TransientError("prop: HTTP 500")

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        self._check()
        return tuple(self.snapshot(i, now) for i in self.instances.values() if not i.gone)

    def get_account(self, now: datetime) -> AccountSnapshot:
        self._check()
        return AccountSnapshot("vast", ACCOUNT, now)

    def list_volumes(self, now: datetime) -> tuple[()]:
        return ()

    def list_ssh_keys(self) -> tuple[()]:
        return ()

    def observe(self, now: datetime) -> AccountObservation:
        return AccountObservation(self.get_account(now), self.list_instances(now))

    def destroy(self, instance_id: str) -> None:
        self._check()
        self.calls.append((self.now, instance_id))
        self.instances[instance_id].gone = True

    def stop(self, instance_id: str) -> None:
        self.destroy(instance_id)


@dataclass
class FakeProber:
    account: FakeAccount

    def probe_all(
        self,
        instances: Sequence[InstanceSnapshot],
        now: datetime,
        leaving: Callable[[], Collection[InstanceRef]] | None = None,
    ) -> list[ProbeOutcome]:
        outcomes = []
        for snapshot in instances:
            instance = self.account.instances[snapshot.instance_id]
            if instance.blind:
                outcomes.append(
                    ProbeOutcome(ACCOUNT, instance.instance_id, now, ProbeStatus.TIMEOUT, 10.0)
                )
                continue
            verdict = Verdict.BUSY if instance.busy else Verdict.IDLE
            sample = GpuSample(
                ACCOUNT,
                instance.instance_id,
                now,
                0,
                verdict,
                SampleSource.DMON,
                sm=90.0 if instance.busy else 0.0,
            )
            outcomes.append(
                ProbeOutcome(
                    ACCOUNT, instance.instance_id, now, ProbeStatus.OK, 1.0, samples=(sample,)
                )
            )
        return outcomes


class Phone:
    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        return DeliveryResult(ok=True, detail="captured")


def _settings(directory: Path, extra: str = "") -> Settings:
    path = directory / "config.toml"
    path.write_text(CONFIG + extra, encoding="utf-8")
    return load_settings(path, {})


class EngineMachine(RuleBasedStateMachine):
    """Random fleets, GPU activity, blind probes, outages and restarts against the engine."""

    start = START
    extra_config = ""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="watchdog-gpu-prop-"))
        copy_migrated_sqlite(self.directory / "prop.db")
        self.engine = create_engine_for(sqlite_url(self.directory / "prop.db"))
        self.store = Store(self.engine)
        self.settings = _settings(self.directory, self.extra_config)
        self.account = FakeAccount(now=self.start)
        self.now = self.start
        self.spend = 0.0  # what the world billed so far (every alive instance, $/h × time)
        self.spent_by_last_tick = 0.0
        self.next_id = 1000
        self.watchdog = self._build()

    def _build(self) -> Watchdog:
        """A fresh daemon process over the same database and world."""
        context = plan_context(self.settings)
        store = self.store
        executor = Executor(
            store,
            {ACCOUNT: self.account},
            self.settings.safety,
            guard=action_guard(store, context),
            current_episodes=lambda since: {
                record.episode_key for record in store.list_findings(seen_since=since)
            },
        )
        return Watchdog(
            store,
            {ACCOUNT: self.account},
            executor,
            tick_settings(self.settings),
            prober=FakeProber(self.account),
            delivery=Phone(),
        )

    def teardown(self) -> None:
        self.engine.dispose()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- the world changes (between ticks) ---------------------------------------------------

    @initialize(fleet=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=6))
    def launch_fleet(self, fleet: list[tuple[bool, bool]]) -> None:
        for busy, protected in fleet:
            self.launch(busy, protected)

    @rule(busy=st.booleans(), protected=st.booleans())
    def launch(self, busy: bool, protected: bool) -> None:
        self.next_id += 1
        name = f"{'keep' if protected else 'job'}-{self.next_id}"
        instance = FakeInstance(str(self.next_id), name, busy)
        self.account.instances[instance.instance_id] = instance

    @rule(data=st.data(), busy=st.booleans())
    def set_busy(self, data: st.DataObject, busy: bool) -> None:
        seen = [i for i in self.account.instances.values() if not i.gone and not i.blind]
        if seen:
            data.draw(st.sampled_from(seen)).busy = busy

    @rule(data=st.data(), blind=st.booleans())
    def set_blind(self, data: st.DataObject, blind: bool) -> None:
        alive = [i for i in self.account.instances.values() if not i.gone]
        if alive:
            data.draw(st.sampled_from(alive)).blind = blind

    @rule(down=st.sampled_from([False, False, True]))  # outages end more often than start
    def outage(self, down: bool) -> None:
        self.account.down = down

    @rule()
    def restart(self) -> None:
        self.watchdog = self._build()

    @rule(ticks=st.integers(min_value=3, max_value=30))
    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.tick()
        self.check_promises()

    def tick(self) -> None:
        self.account.now = self.now
        self.spent_by_last_tick = self.spend
        for instance in self.account.instances.values():
            if instance.gone:
                continue
            if instance.billing:  # it existed through the last tick interval
                self.spend += RATE * TICK.total_seconds() / 3600
            if not instance.billing:
                instance.started_at = self.now
            instance.billing = True
            if instance.busy:
                instance.busy_at.append(self.now)
        self.watchdog.tick(self.now)
        self.after_tick()
        self.now += TICK

    def after_tick(self) -> None:
        """A check that needs the moment right after a tick (subclasses)."""

    # -- the promises ------------------------------------------------------------------------

    def check_promises(self) -> None:
        """After every run of ticks. Only ticks write the store or call the provider, so
        checking after the other steps (as an ``@invariant`` did) re-read the same rows: those
        checks cost a third of the test's time and could never fail where this one passes."""
        self.never_destroys_a_gpu_busy_in_its_window()
        self.never_acts_on_a_protected_instance()
        self.never_destroys_without_a_standing_warning()
        self.never_exceeds_the_fuse_limits()

    def never_destroys_a_gpu_busy_in_its_window(self) -> None:
        # The budget emergency stops busy GPUs too, by design: its destroys are not idle ones.
        by_budget = {a.instance_id for a in self.store.list_actions() if a.rule == "budget"}
        for at, instance_id in self.account.calls:
            if instance_id in by_budget:
                continue
            instance = self.account.instances[instance_id]
            busy = [t for t in instance.busy_at if at - IDLE < t <= at]
            assert not busy, f"{instance_id} destroyed at {at} but busy at {busy}"

    def never_acts_on_a_protected_instance(self) -> None:
        for _, instance_id in self.account.calls:
            assert not self.account.instances[instance_id].protected, instance_id
        for action in self.store.list_actions():
            if action.status in (ActionStatus.BLOCKED, ActionStatus.CANCELLED):
                continue
            assert not self.account.instances[action.instance_id].protected, action

    def never_destroys_without_a_standing_warning(self) -> None:
        warnings: dict[str, list[datetime]] = {}
        withdrawals: dict[str, list[datetime]] = {}
        view = self.store.load_fleet_view(self.now, timedelta(minutes=1), self.now)
        for text, created_at in view.notice_times.items():
            key = NoticeKey.parse(text)
            if key is not None:
                target = warnings if key.kind == WARNING else withdrawals
                target.setdefault(key.episode, []).append(created_at)
        for action in self.store.list_actions():
            if action.status == ActionStatus.BLOCKED or action.rule == "budget":
                continue  # the budget rule skips its grace (skip_grace, the default)
            episode = action.episode_key
            assert ActionKey(episode, action.kind, action.dry_run).format() == (
                action.idempotency_key
            )
            planned = action.created_at
            sent = [t for t in warnings.get(episode, []) if t <= planned - WARN_BEFORE]
            assert sent, f"{action.idempotency_key}: no warning {WARN_BEFORE} ahead"
            standing = max(sent)
            withdrawn = [t for t in withdrawals.get(episode, []) if standing <= t <= planned]
            assert not withdrawn, f"{action.idempotency_key}: warning withdrawn at {withdrawn}"

    def never_exceeds_the_fuse_limits(self) -> None:
        acted = [
            action.created_at
            for action in self.store.list_actions()
            if not action.dry_run
            and action.rule != "budget"
            and action.status not in (ActionStatus.BLOCKED, ActionStatus.CANCELLED)
        ]
        for at in acted:
            assert acted.count(at) <= PER_TICK, f"{acted.count(at)} actions at {at}"
            in_hour = [t for t in acted if at - HOUR < t <= at]
            assert len(in_hour) <= PER_HOUR, f"{len(in_hour)} actions in the hour to {at}"


class BudgetMachine(EngineMachine):
    """The same world under a $2/day budget (the day starts just before the run): once the
    world's spend was over the ceiling at the last tick, a tick whose listing works leaves no
    unprotected instance billing — the overshoot is at most one tick (the fake provider's delay
    is zero) whenever an instance is actionable."""

    start = datetime(2026, 3, 2, 0, 5, tzinfo=UTC)
    extra_config = f"\n[rules.budget]\ndaily_usd = {DAILY_USD}\n"

    def after_tick(self) -> None:
        if self.account.down or self.spent_by_last_tick < DAILY_USD + 0.02:
            return
        billing = [
            i.instance_id for i in self.account.instances.values() if not i.gone and not i.protected
        ]
        assert not billing, (
            f"${self.spent_by_last_tick:.2f} spent by the last tick (ceiling ${DAILY_USD}); "
            f"still billing after {self.now}: {billing}"
        )


FAST = settings(
    max_examples=15,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_engine_keeps_its_promises() -> None:
    run_state_machine_as_test(EngineMachine, settings=FAST)


def test_the_budget_overshoots_by_at_most_one_tick() -> None:
    run_state_machine_as_test(BudgetMachine, settings=settings(FAST, max_examples=10))


MANY_RUNS_SHARDS = 4


@pytest.mark.slow
@pytest.mark.timeout(600)  # 50 runs of 50 steps: about 40 s alone, more on a busy machine
@pytest.mark.parametrize("shard", range(MANY_RUNS_SHARDS))
def test_engine_keeps_its_promises_over_many_runs(shard: int) -> None:
    """200 runs of 50 steps, as four shards of 50 random runs each (independent seeds): the
    test command's parallel workers take a shard each instead of one worker taking them all."""
    del shard  # the shards differ only by their random seeds
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(FAST, max_examples=200 // MANY_RUNS_SHARDS, stateful_step_count=50),
    )
