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
from watchdog_gpu.secrets import SecretReference
from watchdog_gpu.sim.demo_report import DemoResult, ledger_usd, outcomes, print_header
from watchdog_gpu.sim.night_clock import NightClock
from watchdog_gpu.sim.phone import Phone
from watchdog_gpu.sim.scenario import Scenario, parse_scenario
from watchdog_gpu.sim.servers import start_servers
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.ssh_stream import simulated_streams
from watchdog_gpu.sim.story import Narrator, StoryLog
from watchdog_gpu.sim.world import SimulatedWorld
from watchdog_gpu.store import Store, sqlite_url
from watchdog_gpu.wiring import Assembly, assemble, open_store

log = logging.getLogger(__name__)

DEFAULT_SPEED = 720.0  # one real second is 12 virtual minutes: the 8 h night in 40 s
EXIT_INTERRUPTED = 130
PROTECTED_NAME_GLOB = "*keep*"
# A first poll that takes longer (a starved machine) lets the night begin without it.
FIRST_POLLS_WAIT_SECONDS = 10.0


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
    failure code (1 or 2) with no result. Raises StoreError or OSError when the database or a
    loopback port cannot be used.
    """
    wall = wall_clock or SystemClock()
    scenario = demo_scenario(wall.now())
    store = open_store(sqlite_url(database))  # migrated before the night starts
    try:
        _protect_keep(store, scenario.start)
        clock = NightClock(speed, start=scenario.start, end=scenario.end, base=wall)
        world = SimulatedWorld(scenario, clock)
        with Phone(clock).start() as phone, start_servers(world) as servers:
            metrics_port = free_loopback_port()
            settings = demo_settings(
                scenario,
                api_urls=servers.urls,
                phone_url=phone.url,
                database=database,
                metrics_port=metrics_port,
            )
            print_header(scenario, settings, out, speed=speed, database=database)
            night = _Night(scenario, settings, store, clock, world, phone, metrics_port)
            return night.play(out, speed=speed, wall=wall, database=database)
    finally:
        store.engine.dispose()


@dataclass
class _Night:
    """The pieces one played night needs (see :func:`run_demo`)."""

    scenario: Scenario
    settings: Settings
    store: Store
    clock: NightClock
    world: SimulatedWorld
    phone: Phone
    metrics_port: int

    def play(
        self, out: TextIO, *, speed: float, wall: Clock, database: Path
    ) -> tuple[int, DemoResult | None]:
        with story_logging(self.clock) as story_log:
            narrator = Narrator(
                self.scenario, self.world, self.clock, self.phone, story_log, out=out
            )
            metrics: list[str] = []

            def on_started(daemon: Daemon) -> None:
                # The watchdog's first look at every account is at the night's first instant
                # (the clock stands there until it begins), then the night runs from the
                # instant the schedule counts from, so each poll lists the world at or just
                # after its own instant of the night, never before a change due then.
                wait_for_first_polls(daemon, wall)
                self.clock.begin(daemon.scheduled_from)

                def on_end(completed: bool) -> None:
                    # Not completed: the daemon is stopping already (a signal), or the
                    # narrator failed (logged) and the demo must not go on without it.
                    if completed:
                        # A last listing at the night's end, where the clock stands: the
                        # ledger then covers the whole night the providers billed.
                        for account in daemon.assembly.providers:
                            daemon.jobs.poll(account)
                        metrics.extend(scrape_actions(self.metrics_port))
                    if not daemon.stop.is_set():
                        daemon.request_stop("the night is over" if completed else "no narrator")

                narrator.start(daemon.assembly.store, daemon.stop, on_end)

            code = run_daemon(
                self.settings,
                self.clock,
                {},
                build=self.build,
                time_scale=speed,
                wall_clock=wall,
                on_started=on_started,
            )
            narrator.join()
            ended_at = self.clock.freeze()
            narrator.tell(self.store, ended_at)  # what happened while stopping
        if code != EXIT_OK:
            return code, None
        result = DemoResult(
            completed=narrator.completed,
            ended_at=ended_at,
            instances=outcomes(self.scenario, self.world, database),
            phone=self.phone.messages(),
            metrics=metrics,
            scheduler_notes=story_log.scheduler_notes,
            ledger_usd=ledger_usd(database, self.scenario.start, ended_at),
        )
        return (EXIT_OK if result.completed else EXIT_INTERRUPTED), result

    def build(self, settings: Settings, clock: Clock, environ: Mapping[str, str]) -> Assembly:
        """The engine over the demo's store, with the simulator's SSH hosts for the probe."""
        runner = SimulatedSshRunner(self.world)
        streams = simulated_streams(settings, self.world)
        assembly = assemble(
            settings, clock, environ, store=self.store, runner=runner, streams=streams
        )
        assembly.job_scope = self.clock.hold  # a job happens at one instant of the night
        return assembly


def wait_for_first_polls(daemon: Daemon, wall: Clock) -> None:
    """Wait (real time, at most :data:`FIRST_POLLS_WAIT_SECONDS`) until every account's first
    poll has an outcome, or the daemon stops."""
    deadline = wall.monotonic() + FIRST_POLLS_WAIT_SECONDS
    while not daemon.stop.is_set() and wall.monotonic() < deadline:
        if "not_polled" not in daemon.jobs.polled().values():
            return
        wall.sleep(0.001)


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
    """The ``watchdog_gpu_actions_total`` samples the daemon's ``/metrics`` exports that counted
    something (every known series starts at 0: those would bury the ones that happened)."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
    except httpx.HTTPError as error:
        return [f"(the metrics endpoint did not answer: {type(error).__name__})"]
    return [
        line
        for line in response.text.splitlines()
        if line.startswith("watchdog_gpu_actions_total") and not line.endswith(" 0.0")
    ]
