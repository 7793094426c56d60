"""``watchdog-gpu demo``: the real daemon against a scripted night, played in under a minute.

What runs is ``watchdog-gpu run`` (:func:`watchdog_gpu.daemon.run_daemon`: APScheduler jobs, the
supervisor, the metrics endpoint) over the real engine: provider adapters over HTTP to the
simulator's Vast, RunPod and Lambda servers on 127.0.0.1, the prober against the simulator's fake
SSH hosts (real ``nvidia-smi dmon`` text for the real parser), the SQLite store with its
migrations, the rules, the planner, the executor, and notifications through Apprise
(``json://``) to the demo's phone (:mod:`watchdog_gpu.sim.phone`). Only time differs: a
:class:`NightClock` plays the night ``speed`` times faster, and the daemon waits its intervals
(configured in the night's time) ``speed`` times faster too (its ``time_scale``).

The night (``demo_night.toml``) is re-dated to the coming night (its time of day kept), so the
database it leaves holds records newer than the machine's clock, which ``watchdog-gpu status``
shows as of its latest record. The rules are ``demo_config.toml``; instances named ``*keep*`` are
protected in the database, as ``watchdog-gpu protect --name '*keep*'`` would.
"""

from __future__ import annotations

import logging
import socket
import threading
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import httpx

from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.config import (
    AccountConfig,
    MetricsSection,
    NotifyRoute,
    NotifySection,
    RulesConfig,
    Settings,
    WatchdogSection,
)
from watchdog_gpu.daemon import EXIT_OK, Daemon, run_daemon
from watchdog_gpu.fleet import ProtectionKind
from watchdog_gpu.log import QUIET_LOGGERS, install_redaction
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.sim.demo_report import print_header
from watchdog_gpu.sim.phone import Phone, PhoneMessage
from watchdog_gpu.sim.scenario import Scenario, parse_scenario
from watchdog_gpu.sim.servers import start_servers
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.story import Narrator, StoryLog, clock_text
from watchdog_gpu.sim.world import SimulatedWorld
from watchdog_gpu.store import Store, create_engine_for, sqlite_url
from watchdog_gpu.wiring import Assembly, assemble, open_store

log = logging.getLogger(__name__)

DEFAULT_SPEED = 720.0  # one real second is 12 virtual minutes: the 8 h night in 40 s
EXIT_INTERRUPTED = 130
PROTECTED_NAME_GLOB = "*keep*"
RESULT_WORDS = {
    ActionStatus.VERIFIED: "verified",
    ActionStatus.UNVERIFIED: "unverified",
    ActionStatus.CALLED: "unverified",
    ActionStatus.PENDING: "pending",
    ActionStatus.CLAIMED: "pending",
    ActionStatus.FAILED: "failed",
    ActionStatus.DRY_RUN: "dry run",
    ActionStatus.HELD: "held",
    ActionStatus.BLOCKED: "held by the fuse",
    ActionStatus.CANCELLED: "cancelled",
}


def demo_scenario(now: datetime) -> Scenario:
    """The shipped night (``demo_night.toml``), starting at its time of day on or after ``now``."""
    text = resources.files("watchdog_gpu.sim").joinpath("demo_night.toml").read_text("utf-8")
    scenario = parse_scenario(text)
    return scenario.model_copy(update={"start": upcoming(scenario.start, now)})


def upcoming(start: datetime, now: datetime) -> datetime:
    """The first instant at or after ``now`` with the UTC time of day of ``start``."""
    candidate = start + timedelta(days=(now - start).days)
    while candidate < now:
        candidate += timedelta(days=1)
    return candidate


def demo_config() -> dict[str, Any]:
    """The shipped rules (``demo_config.toml``) as a TOML table."""
    text = resources.files("watchdog_gpu.sim").joinpath("demo_config.toml").read_text("utf-8")
    return tomllib.loads(text)


def demo_settings(
    scenario: Scenario,
    *,
    api_urls: Mapping[str, str],
    phone_url: str,
    database: Path,
    metrics_port: int,
) -> Settings:
    """The daemon's configuration for the night: ``demo_config.toml``'s mode and rules, one
    account per scenario account at the simulator's URL with its key, the phone as the only
    notification route, metrics on ``127.0.0.1:metrics_port``, the database at ``database``,
    polls and probes every scenario ``tick`` (virtual time)."""
    table = demo_config()
    watchdog = WatchdogSection.model_validate(
        {
            **table.get("watchdog", {}),
            "poll_interval": scenario.tick,
            "probe_interval": scenario.tick,
            "database_url": sqlite_url(database),
            "log_level": "warning",
        }
    )
    accounts = [
        AccountConfig(
            name=account.name,
            provider=account.provider,
            api_key=SecretReference.plain(account.effective_api_key),
            api_url=api_urls[account.provider],
        )
        for account in scenario.accounts
    ]
    return Settings(
        watchdog=watchdog,
        accounts=accounts,
        rules=RulesConfig.model_validate(table.get("rules", {})),
        metrics=MetricsSection(listen_address="127.0.0.1", port=metrics_port),
        notify=NotifySection(routes=[NotifyRoute(url=SecretReference.plain(phone_url))]),
    )


class NightClock:
    """Virtual time ``start + speed × (real time since begin())``, standing still at ``start``
    until :meth:`begin` and at ``end`` from then on (or from :meth:`freeze`): the world stops
    billing there, so the night's figures are exact however long the shutdown takes.
    ``monotonic()`` counts virtual seconds since ``begin()`` and never stops; ``sleep(s)`` sleeps
    ``s / speed`` real seconds. Thread-safe."""

    def __init__(self, speed: float, *, start: datetime, end: datetime, base: Clock) -> None:
        if not speed > 0:
            raise ValueError("speed must be greater than 0")
        self.speed = float(speed)
        self.start = start
        self._end = end
        self._base = base
        self._origin: float | None = None
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Let the time run (once; later calls change nothing)."""
        with self._lock:
            if self._origin is None:
                self._origin = self._base.monotonic()

    def monotonic(self) -> float:
        origin = self._origin
        return 0.0 if origin is None else (self._base.monotonic() - origin) * self.speed

    def now(self) -> datetime:
        running = self.start + timedelta(seconds=self.monotonic())
        with self._lock:
            return min(running, self._end)

    def freeze(self) -> datetime:
        """Stop the time now (an interrupted night); returns the instant it stands at."""
        instant = self.now()
        with self._lock:
            self._end = min(self._end, instant)
        return instant

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._base.sleep(seconds / self.speed)


@dataclass
class InstanceOutcome:
    """What happened to one instance during the night, and what it cost."""

    account: str
    instance_id: str
    name: str
    done: str
    final_state: str
    spend_usd: float
    without_usd: float


@dataclass
class DemoResult:
    """The night as it ended."""

    completed: bool
    ended_at: datetime
    instances: list[InstanceOutcome]
    phone: list[PhoneMessage]
    metrics: list[str]
    scheduler_notes: int

    @property
    def spend_usd(self) -> float:
        return sum(item.spend_usd for item in self.instances)

    @property
    def without_usd(self) -> float:
        return sum(item.without_usd for item in self.instances)


def run_demo(
    database: Path,
    *,
    speed: float = DEFAULT_SPEED,
    out: TextIO,
    wall_clock: Clock | None = None,
) -> tuple[int, DemoResult | None]:
    """Play the night into the new SQLite file ``database``, telling it on ``out``.

    Returns ``(code, result)``: 0 when the night was played to its end; 130 when it was
    interrupted (SIGINT/SIGTERM; the result covers the night so far); the daemon's start-up
    failure code (1 or 2) with no result.
    """
    wall = wall_clock or SystemClock()
    scenario = demo_scenario(wall.now())
    store = open_store(sqlite_url(database))  # migrated before the night starts
    _protect_keep(store, scenario.start)
    clock = NightClock(speed, start=scenario.start, end=scenario.end, base=wall)
    world = SimulatedWorld(scenario, clock)
    phone = Phone(clock).start()
    servers = start_servers(world)
    metrics_port = free_loopback_port()
    settings = demo_settings(
        scenario,
        api_urls=servers.urls,
        phone_url=phone.url,
        database=database,
        metrics_port=metrics_port,
    )
    print_header(scenario, settings, out, speed=speed, database=database)
    try:
        with story_logging(clock) as story_log:
            narrator = Narrator(scenario, world, clock, phone, story_log, out=out)
            metrics: list[str] = []

            def on_started(daemon: Daemon) -> None:
                clock.begin()  # the night starts when the jobs do, not while building

                def on_end(completed: bool) -> None:
                    # Not completed: the daemon is stopping already (a signal), or the
                    # narrator failed (logged) and the demo must not go on without it.
                    if completed:
                        metrics.extend(scrape_actions(metrics_port))
                    if not daemon.stop.is_set():
                        daemon.request_stop("the night is over" if completed else "no narrator")

                narrator.start(daemon.assembly.store, daemon.stop, on_end)

            def build(settings: Settings, clock: Clock, environ: Mapping[str, str]) -> Assembly:
                runner = SimulatedSshRunner(world)
                return assemble(settings, clock, environ, store=store, runner=runner)

            code = run_daemon(
                settings,
                clock,
                {},
                build=build,
                time_scale=speed,
                wall_clock=wall,
                on_started=on_started,
            )
            narrator.join()
            ended_at = clock.freeze()
            narrator.tell(store, ended_at)  # what happened while stopping
        if code != EXIT_OK:
            return code, None
        result = DemoResult(
            completed=narrator.completed,
            ended_at=ended_at,
            instances=_outcomes(scenario, world, database),
            phone=phone.messages(),
            metrics=metrics,
            scheduler_notes=story_log.scheduler_notes,
        )
    finally:
        servers.stop()
        phone.stop()
    return (EXIT_OK if result.completed else EXIT_INTERRUPTED), result


def _protect_keep(store: Store, now: datetime) -> None:
    """What ``watchdog-gpu protect --name '*keep*'`` records."""
    store.add_protection(
        ProtectionKind.NAME_GLOB, PROTECTED_NAME_GLOB, now, reason="the lab's evaluation server"
    )
    store.add_audit_event(
        "protection_added",
        now,
        message=f"name {PROTECTED_NAME_GLOB} protected (watchdog-gpu protect --name "
        f"'{PROTECTED_NAME_GLOB}')",
        data={"kind": "name", "value": PROTECTED_NAME_GLOB, "account": None, "by": "demo"},
    )


@contextmanager
def story_logging(clock: Clock) -> Iterator[StoryLog]:
    """Route log records of WARNING and above into the story while inside (secrets masked)."""
    install_redaction()
    root = logging.getLogger()
    handler = StoryLog(clock)
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape_actions(port: int) -> list[str]:
    """The ``watchdog_gpu_actions_total`` samples the daemon's ``/metrics`` exports."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
    except httpx.HTTPError as error:
        return [f"(the metrics endpoint did not answer: {type(error).__name__})"]
    return [
        line for line in response.text.splitlines() if line.startswith("watchdog_gpu_actions_total")
    ]


def _outcomes(scenario: Scenario, world: SimulatedWorld, database: Path) -> list[InstanceOutcome]:
    """Per instance: the actions taken (from the outbox), protected reports (from the audit
    log), the final state and the spend with and without the watchdog (from the world)."""
    reader = Store(create_engine_for(sqlite_url(database)))
    try:
        actions = reader.list_actions()
        audit = reader.list_audit_events()
    finally:
        reader.engine.dispose()
    outcomes = []
    for account in scenario.accounts:
        for instance in account.instances:
            ref = (account.name, instance.id)
            done = [
                f"{row.kind.value} {clock_text(row.created_at)} by {row.rule}, "
                + RESULT_WORDS.get(ActionStatus(row.status), str(row.status))
                for row in actions
                if (row.account, row.instance_id) == ref
            ]
            reports = sorted(
                {
                    str(event.rule)
                    for event in audit
                    if event.kind == "protected" and (event.account, event.instance_id) == ref
                }
            )
            if reports:
                done.append(f"protected: reported by {', '.join(reports)}, never touched")
            outcomes.append(
                InstanceOutcome(
                    account=account.name,
                    instance_id=instance.id,
                    name=instance.name or instance.id,
                    done="; ".join(done) or "never touched",
                    final_state=world.state(account.name, instance.id) or "not created",
                    spend_usd=world.spend_usd(account.name, instance.id),
                    without_usd=world.spend_without_watchdog_usd(account.name, instance.id),
                )
            )
    return outcomes
