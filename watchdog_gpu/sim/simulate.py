"""``watchdog-gpu simulate``: the real daemon logic against a simulated world on a virtual clock.

What runs is the production path: the provider adapters (over an in-process HTTP transport to the
dialect handlers of the built-in simulator — the same handlers ``sim serve`` puts on loopback),
the SSH prober with a fake runner that renders real ``nvidia-smi`` text for the real parser, the
SQLite store with the real migrations, the rules, the planner, the executor and the notification
outbox. Only time is virtual: the clock jumps from tick to tick, so a simulated day with a dozen
instances runs in seconds.

The output (``SimulationResult.to_json()``) is the public contract of ``docs/scenario-format.md``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.config import AccountConfig, Settings
from watchdog_gpu.config.accounts import AccountSshConfig
from watchdog_gpu.config.checks import actions_providers_cannot_take
from watchdog_gpu.errors import ConfigError
from watchdog_gpu.gc_freeze import CollectBetweenJobs
from watchdog_gpu.model import ActionStatus, PlannedNotification
from watchdog_gpu.notify.delivery import Deliverer, DeliveryResult
from watchdog_gpu.probe.runner import AccountRunners
from watchdog_gpu.reports import TickReport
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.sim.faults import FaultSettings
from watchdog_gpu.sim.http import SimRequest, normalise_path
from watchdog_gpu.sim.records import ActionRecord
from watchdog_gpu.sim.scenario import Scenario
from watchdog_gpu.sim.servers import DIALECTS
from watchdog_gpu.sim.servers.base import Dialect
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.ssh_stream import simulated_streams
from watchdog_gpu.sim.world import SimulatedWorld, cents_with_and_without
from watchdog_gpu.store import Store, sqlite_url
from watchdog_gpu.store.rows import ActionRow
from watchdog_gpu.wake import Wakes
from watchdog_gpu.wiring import Assembly, assemble, open_store

SIM_BASE_URLS = {
    "vast": "http://vast.sim.invalid",
    "runpod": "http://runpod.sim.invalid",
    "lambda": "http://lambda.sim.invalid/api/v1",
}
# An action still waiting for verification when the run ends is reported as unverified.
_RESULTS = {
    ActionStatus.VERIFIED: "verified",
    ActionStatus.UNVERIFIED: "unverified",
    ActionStatus.CALLED: "unverified",
    ActionStatus.PENDING: "unverified",
    ActionStatus.CLAIMED: "unverified",
    ActionStatus.FAILED: "failed",
    ActionStatus.DRY_RUN: "dry_run",
    ActionStatus.HELD: "held",
    ActionStatus.BLOCKED: "blocked",
    ActionStatus.CANCELLED: "cancelled",
}


# The statuses of an action whose call the provider accepted.
_CALLED = frozenset({ActionStatus.VERIFIED, ActionStatus.UNVERIFIED, ActionStatus.CALLED})


class InProcessTransport(httpx.BaseTransport):
    """An httpx transport that hands each request to a dialect handler in this process.

    A stalled answer (the ``timeout`` fault) costs the client's read timeout in virtual time and
    then raises ``httpx.ReadTimeout``, as a real stalled server would.
    """

    def __init__(self, dialect: Dialect, clock: VirtualClock, timeout_seconds: float) -> None:
        self.dialect = dialect
        self.clock = clock
        self.timeout_seconds = timeout_seconds

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        path = normalise_path(request.url.path)
        prefix = normalise_path(httpx.URL(SIM_BASE_URLS[self.dialect.provider]).path)
        if prefix != "/" and path.startswith(prefix):
            path = path[len(prefix) :] or "/"
        sim_request = SimRequest(
            method=request.method,
            path=path,
            query=parse_qs(request.url.query.decode(), keep_blank_values=True),
            headers={name.lower(): value for name, value in request.headers.items()},
            body=body,
        )
        response = self.dialect.handle(sim_request)
        if response.stall_seconds > 0:
            self.clock.sleep(self.timeout_seconds)
            raise httpx.ReadTimeout("simulated server stalled", request=request)
        headers = [("content-type", response.content_type), *response.headers]
        return httpx.Response(
            response.status, headers=headers, content=response.body, request=request
        )


@dataclass
class CapturingDelivery:
    """Delivers every notification by recording it (the simulator's phone)."""

    clock: VirtualClock
    # Every message delivered (the items of a batch one by one) and the push it went out in.
    sent: list[tuple[datetime, PlannedNotification]] = field(default_factory=list)
    push_of: list[int] = field(default_factory=list)
    pushes: int = 0

    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        self.pushes += 1
        for item in notification.items or (notification,):
            self.sent.append((self.clock.now(), item))
            self.push_of.append(self.pushes)
        return DeliveryResult(ok=True, detail="captured", routed=True)


@dataclass
class SimulationResult:
    scenario: Scenario
    mode: str
    actions: list[dict[str, Any]]
    notifications: list[dict[str, Any]]
    instances: dict[str, dict[str, Any]]

    def totals(self) -> dict[str, float]:
        spend = sum(item["spend_usd"] for item in self.instances.values())
        without = sum(item["spend_without_watchdog_usd"] for item in self.instances.values())
        return {
            "spend_usd": round(spend, 2),
            "spend_without_watchdog_usd": round(without, 2),
            "saved_usd": round(without - spend, 2),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name,
            "mode": self.mode,
            "actions": self.actions,
            "notifications": self.notifications,
            "instances": self.instances,
            "totals": self.totals(),
        }


def simulation_settings(scenario: Scenario, base: Settings | None) -> Settings:
    """The daemon configuration for a scenario: ``base``'s rules, safety and mode (the
    documented defaults in enforce mode without one), the scenario's accounts, no network.

    A scenario account that ``base`` also lists (by name) keeps that entry's own settings —
    its ``ssh`` (without a key its hosts are never probed: only the provider's API is seen),
    ``idle_evidence``, ``protect`` —; the others are probed over the simulated SSH."""
    configured = {account.name: account for account in base.accounts} if base else {}
    accounts = []
    for account in scenario.accounts:
        network = {
            "provider": account.provider,
            "api_key": SecretReference.plain(account.effective_api_key),
            "api_url": SIM_BASE_URLS[account.provider],
        }
        own = configured.get(account.name)
        if own is not None:
            accounts.append(own.model_copy(update=network))
        else:
            accounts.append(
                AccountConfig(name=account.name, ssh=AccountSshConfig(use_agent=True), **network)
            )
    if base is None:
        base = Settings()
        watchdog = base.watchdog.model_copy(update={"mode": "enforce"})
    else:
        watchdog = base.watchdog
    watchdog = watchdog.model_copy(
        update={"poll_interval": scenario.tick, "probe_interval": scenario.tick}
    )
    metrics = base.metrics.model_copy(update={"enabled": False})
    notify = base.notify.model_copy(update={"routes": []})
    settings = base.model_copy(
        update={"accounts": accounts, "watchdog": watchdog, "metrics": metrics, "notify": notify}
    )
    # The scenario's accounts replace the file's: what their providers cannot do is checked
    # again (a "stop" rule with a Lambda account in the scenario).
    problems = actions_providers_cannot_take(settings)
    if problems:
        raise ConfigError(problems)
    return settings


@contextmanager
def simulation(
    scenario: Scenario,
    base: Settings | None = None,
    *,
    database: Path | None = None,
    database_url: str | None = None,
) -> Iterator[Simulation]:
    """A ready simulation (world, clock, engine on a SQLite file, or on ``database_url`` — an
    empty database of any supported engine, e.g. PostgreSQL); closed on exit."""
    with tempfile.TemporaryDirectory(prefix="watchdog-gpu-sim-") as scratch:
        path = database or Path(scratch) / "simulate.db"
        sim = Simulation(
            scenario, simulation_settings(scenario, base), path, database_url=database_url
        )
        try:
            yield sim
        finally:
            sim.close()


class Simulation:
    """One scenario run: call :meth:`run` (or :meth:`step` tick by tick), then :meth:`result`."""

    def __init__(
        self,
        scenario: Scenario,
        settings: Settings,
        database: Path,
        *,
        clock: VirtualClock | None = None,
        world: SimulatedWorld | None = None,
        delivery: Deliverer | None = None,
        first_tick: datetime | None = None,
        database_url: str | None = None,
    ) -> None:
        """``clock``, ``world``, ``delivery`` and ``first_tick`` let a harness resume a run
        after the process was killed (a world rebuilt from a journal, a later first tick);
        ``database_url`` replaces the SQLite file ``database`` (PostgreSQL runs)."""
        self.scenario = scenario
        self.settings = settings
        self.database = database
        self.clock = clock or VirtualClock(scenario.start)
        self.world = world or SimulatedWorld(scenario, self.clock)
        faults = FaultSettings(stall_seconds=1.0)
        self.dialects = {name: cls(self.world, faults) for name, cls in DIALECTS.items()}
        self.capture = CapturingDelivery(self.clock)
        self.delivery: Deliverer = delivery or self.capture
        self.store: Store = open_store(database_url or sqlite_url(database))
        self.assembly = self.build()
        self.next_tick = first_tick or scenario.start
        # Wakes between ticks (wake.py) with the streaming probe, whose rows come in batches.
        self.wakes = Wakes() if settings.probe.mode == "stream" else None
        self.wakes_ran = 0
        self.collector: CollectBetweenJobs | None = None  # while collecting()

    def build(self) -> Assembly:
        """(Re)build the engine over the same store, world and clock: a restart of the daemon."""
        keyed = [a.name for a in self.settings.accounts if a.ssh.has_authentication]
        keyless = [a.name for a in self.settings.accounts if not a.ssh.has_authentication]
        assembly = assemble(
            self.settings,
            self.clock,
            {},
            store=self.store,
            transport_for=self._transport,
            # An account without an SSH key is never probed: its hosts refuse the login, as
            # the daemon's per-account runners do (probe/runner.AccountRunners).
            # Without any key there is no prober at all, as in the daemon.
            runner=AccountRunners({name: SimulatedSshRunner(self.world) for name in keyed})
            if keyed
            else None,
            streams=simulated_streams(self.settings, self.world, keyless),
            # Retries wait on the virtual clock: seeded jitter keeps a scenario's run repeatable.
            jitter_seed=self.scenario.name,
        )
        assembly.watchdog.delivery = self.delivery
        return assembly

    def _transport(self, account: AccountConfig) -> httpx.BaseTransport:
        timeout = account.request_timeout.total_seconds()
        return InProcessTransport(self.dialects[account.provider], self.clock, timeout)

    @contextmanager
    def collecting(self) -> Iterator[CollectBetweenJobs]:
        """The cyclic collector between ticks as the daemon runs it between its jobs
        (gc_freeze.py), on the virtual clock: for a run of many ticks (``simulate``, benchmarks)."""
        self.collector = CollectBetweenJobs(self.clock.monotonic)
        try:
            with self.collector.active():
                yield self.collector
        finally:
            self.collector = None

    @property
    def finished(self) -> bool:
        return self.next_tick > self.scenario.end

    def step(self) -> None:
        """Run one tick at the next scheduled instant (later if the last tick overran), then
        the wakes it calls for before the next one, as the daemon does (``wake.py``)."""
        if self.clock.now() < self.next_tick:
            self.clock.set(self.next_tick)
        # Each phase reads the virtual clock as it starts, as the daemon's jobs do: what a
        # hanging provider's retries cost moves everything after them (decisions, calls,
        # messages) to when it really happened.
        report = self.assembly.watchdog.tick(self.clock.now(), clock=self.clock.now)
        self.next_tick += self.scenario.tick
        self.wakes_ran += self._wake_until(report)
        if self.collector is not None:
            self.collector.after_job()

    def _wake_until(self, report: TickReport) -> int:
        """Run the wakes ``report`` calls for before the next tick (and the scenario's end);
        how many ran."""
        if self.wakes is None:
            return 0
        bound = min(self.next_tick, self.scenario.end + timedelta(microseconds=1))
        ran = 0
        wake = self.wakes.after_evaluation(
            now=report.now,
            next_change=report.next_change,
            next_due=report.next_due,
            next_listed=report.next_listed,
            probed_at=report.probed_at,
            next_tick=bound,
        )
        while wake is not None:
            if self.clock.now() < wake:
                self.clock.set(wake)
            now = self.clock.now()
            listing = self.wakes.listing
            self.wakes.ran(now)
            report = self.assembly.watchdog.wake(now, listing=listing, clock=self.clock.now)
            ran += 1
            wake = self.wakes.after_evaluation(
                now=report.now,
                next_change=report.next_change,
                next_due=report.next_due,
                next_listed=report.next_listed,
                probed_at=report.probed_at,
                next_tick=bound,
            )
        return ran

    def run(self, on_step: Callable[[Simulation], None] | None = None) -> SimulationResult:
        """Tick to the scenario's end (``on_step`` after each tick, e.g. to show progress)."""
        while not self.finished:
            self.step()
            if on_step is not None:
                on_step(self)
        if self.clock.now() < self.scenario.end:
            self.clock.set(self.scenario.end)
        return self.result()

    @property
    def elapsed(self) -> timedelta:
        """Simulated time since the scenario's start."""
        return self.clock.now() - self.scenario.start

    def actions_so_far(self) -> int:
        """Actions recorded so far (a database read: call it now and then, not every tick)."""
        return len(self.store.list_actions())

    def restart(self) -> None:
        """Throw the engine away and build a new one, as a daemon restart would."""
        self.assembly.close()
        self.assembly = self.build()

    def offset(self, instant: datetime) -> int:
        return round((instant - self.scenario.start).total_seconds())

    def result(self) -> SimulationResult:
        return SimulationResult(
            scenario=self.scenario,
            mode=self.settings.watchdog.mode,
            actions=self._actions(),
            notifications=self._notifications(),
            instances=self._instances(),
        )

    def _actions(self) -> list[dict[str, Any]]:
        verified_at = self._verified_at()
        calls = [call for call in self.world.actions() if call.source == "api"]
        return [self._action_entry(row, calls, verified_at) for row in self.store.list_actions()]

    def _verified_at(self) -> dict[str, datetime]:
        """When each (account, instance, rule)'s first action was verified, by its key."""
        verified_at: dict[str, datetime] = {}
        for event in self.store.list_audit_events():
            if event.kind == "action_verified" and event.instance_id is not None:
                verified_at.setdefault(
                    f"{event.account}/{event.instance_id}/{event.rule}", event.at
                )
        return verified_at

    def _action_entry(
        self, row: ActionRow, calls: list[ActionRecord], verified_at: dict[str, datetime]
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "offset_s": self.offset(row.created_at),
            "at": _iso(row.created_at),
            "account": row.account,
            "instance": row.instance_id,
            "rule": row.rule,
            "action": row.kind.value,
            "dry_run": row.dry_run,
            "result": _RESULTS.get(ActionStatus(row.status), row.status),
        }
        onset = row.evidence.get("idle_onset")
        if isinstance(onset, str):
            item["idle_onset_offset_s"] = self.offset(datetime.fromisoformat(onset))
        called = _provider_call_at(row, calls)
        if called is not None:
            item["called_offset_s"] = self.offset(called)
        verified = verified_at.get(f"{row.account}/{row.instance_id}/{row.rule}")
        if verified is not None and row.status == ActionStatus.VERIFIED:
            item["verified_offset_s"] = self.offset(verified)
        return item

    def _notifications(self) -> list[dict[str, Any]]:
        return [
            {
                "offset_s": self.offset(at),
                "severity": note.severity.value,
                "account": note.account,
                "instance": note.instance_id,
                "rule": note.rule,
                "title": note.title,
                "push": push,
            }
            for (at, note), push in zip(self.capture.sent, self.capture.push_of, strict=True)
        ]

    def _instances(self) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = {}
        for account in self.scenario.accounts:
            for instance in account.instances:
                state = self.world.state(account.name, instance.id)
                spend, without = cents_with_and_without(
                    self.world.spend_usd(account.name, instance.id),
                    self.world.spend_without_watchdog_usd(account.name, instance.id),
                )
                result[f"{account.name}/{instance.id}"] = {
                    "final_state": state or "not_created",
                    "spend_usd": spend,
                    "spend_without_watchdog_usd": without,
                }
        return result

    def close(self) -> None:
        self.assembly.close()
        self.store.engine.dispose()


def _iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def _provider_call_at(row: ActionRow, calls: list[ActionRecord]) -> datetime | None:
    """When the simulated provider received the action's call (what it saw): later than the
    decision when the call failed and was repeated, or the fuse deferred it."""
    if row.status not in _CALLED:
        return None
    wanted = (row.account, row.instance_id, row.kind.value)
    return next(
        (
            call.at
            for call in calls
            if (call.account, call.instance_id, call.action) == wanted and call.at >= row.created_at
        ),
        None,
    )
