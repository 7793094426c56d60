"""The daemon's wakes (wake.py): with the real scheduler over the real engine (loopback
simulator servers, real SQLite, the simulated hosts' batched dmon streams) on an accelerated
clock, an idle warning and destroy that fall due between two evaluate ticks are decided by a
one-shot wake job — once the rows covering them are in — not a tick later, and never before
their limit. Waits for conditions with a generous bound, never for durations."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from tests.unit.test_daemon_jobs import CountingPinger
from tests.unit.test_daemon_time_scale import NIGHT, _store, settings_for, wait_until
from watchdog_gpu.clock import SystemClock, VirtualClock
from watchdog_gpu.config import Settings, WatchdogSection
from watchdog_gpu.config.sections import MetricsSection
from watchdog_gpu.daemon import Daemon
from watchdog_gpu.jobs import Jobs, Progress, poll_job_id
from watchdog_gpu.model import PlanStatus
from watchdog_gpu.reports import TickReport
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig
from watchdog_gpu.sim.clock import AcceleratedClock
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.servers import start_servers
from watchdog_gpu.sim.simulate import simulation
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.ssh_stream import SimulatedStreams
from watchdog_gpu.sim.world import SimulatedWorld
from watchdog_gpu.wake import ROWS_LAG, Wakes
from watchdog_gpu.wiring import assemble

BUSY = '{ at = "0s", state = "running", gpu_util = 95 }'
# The time-scale test's night, with the job ending at 50 s.
SCENARIO = NIGHT.replace(f"[{BUSY}]", f'[{BUSY}, {{ at = "50s", gpu_util = 0 }}]')
IDLE = IdleGpuConfig(idle=timedelta(minutes=3), warn_before=timedelta(minutes=1))
SPEED = 30.0  # a 60 s tick is two seconds of wall time
SECOND = timedelta(seconds=1)


def test_an_idle_limit_between_two_ticks_is_decided_by_a_wake(tmp_path: Path) -> None:
    assert SCENARIO != NIGHT
    scenario = parse_scenario(tomllib.loads(SCENARIO))
    wall = SystemClock()
    clock = AcceleratedClock(SPEED, start=scenario.start, base=wall)
    world = SimulatedWorld(scenario, clock)
    with start_servers(world) as servers:
        settings = settings_for(timedelta(seconds=60), api_url=servers.urls["vast"])
        settings = settings.model_copy(
            update={
                "metrics": MetricsSection(enabled=False),
                "rules": settings.rules.model_copy(update={"idle_gpu": IDLE}),
            }
        )
        assembly = assemble(
            settings,
            clock,
            {},
            store=_store(tmp_path),
            runner=SimulatedSshRunner(world),
            streams=SimulatedStreams(world),
        )
        daemon = Daemon(settings, assembly, clock, {}, time_scale=SPEED, wall_clock=wall)
        requested: list[datetime] = []  # the wakes the evaluations asked for (engine time)
        woken: list[tuple[datetime, datetime]] = []  # each wake job's run, start to end
        wake, wake_at = daemon.jobs.wake, daemon.wake_at

        def spy_wake() -> TickReport | None:
            started = clock.now()
            try:
                return wake()
            finally:
                woken.append((started, clock.now()))

        def spy_wake_at(at: datetime | None) -> None:
            if at is not None:
                requested.append(at)
            wake_at(at)

        daemon.jobs.wake = spy_wake  # type: ignore[method-assign]
        daemon.wake_at = spy_wake_at  # type: ignore[method-assign]
        try:
            daemon.start()
            wait_until(lambda: bool(assembly.store.list_actions()), "the destroy")
        finally:
            daemon.shutdown()

    events = {e.kind: e for e in reversed(assembly.store.list_audit_events()) if e.rule}
    warning, planned = events["warning"], events["action_planned"]
    onset = datetime.fromisoformat(str(warning.data["evidence.idle_onset"]))
    warn_point, limit = onset + IDLE.idle - IDLE.warn_before, onset + IDLE.idle
    # The evaluations asked for a wake once the rows covering each point are in ...
    for point in (warn_point, limit):
        assert any(abs(at - (point + ROWS_LAG)) <= SECOND for at in requested), (point, requested)
    # ... the wake job ran and decided both, never before their instants (observed idleness) ...
    for decided, point in ((warning.at, warn_point), (planned.at, limit)):
        assert decided >= point
        assert any(start <= decided <= end for start, end in woken), (decided, woken)
    # ... and the destroy still follows its warning by warn_before.
    assert planned.at - warning.at >= IDLE.warn_before


@dataclass
class RecordingWaker:
    """The scheduler's side of wakes: the next evaluate run a tick away; the wakes asked for."""

    clock: VirtualClock
    asked: list[datetime | None] = field(default_factory=list)

    def next_evaluation(self) -> datetime | None:
        return self.clock.now() + timedelta(seconds=60)

    def wake_at(self, at: datetime | None) -> None:
        self.asked.append(at)


def test_a_wake_job_takes_the_rows_evaluates_and_wakes_act_but_pings_nothing() -> None:
    scenario = parse_scenario(tomllib.loads(SCENARIO))
    base = Settings(watchdog=WatchdogSection(mode="enforce"))
    base = base.model_copy(update={"rules": base.rules.model_copy(update={"idle_gpu": IDLE})})
    with simulation(scenario, base) as sim:
        waker, pinger, acted = RecordingWaker(sim.clock), CountingPinger(), list[datetime]()
        jobs = Jobs(
            sim.assembly.watchdog,
            sim.clock,
            Progress(sim.clock),
            poll_interval=timedelta(seconds=60),
            dead_mans_switch=pinger,
            wake_act=lambda: acted.append(sim.clock.now()),
            wakes=Wakes(),
            waker=waker,
        )
        for minute in range(3):  # ticks at 0, 60 and 120 s; idle from 50 s: warned at ~170 s
            sim.clock.set(scenario.start + minute * timedelta(seconds=60))
            jobs.poll("vast-main")
            jobs.probe()
            jobs.evaluate()
        wake = waker.asked[-1]
        assert wake is not None
        assert waker.asked[:-1] == [None, None]  # nothing due before the tick after them
        assert scenario.start + timedelta(seconds=170) + ROWS_LAG <= wake
        assert wake < scenario.start + timedelta(seconds=180)
        assert not sim.store.list_findings()  # 2 observed idle minutes not reached at 120 s

        sim.clock.set(wake)
        report = jobs.wake()

    assert report is not None
    (finding,) = report.findings
    assert report.plan is not None
    assert [d.status for d in report.plan.decisions] == [PlanStatus.WARN]
    assert report.probed_at == wake  # the rows covering the warning point were taken
    assert acted[-1] == wake  # the act job is woken as after any evaluation
    assert pinger.pings == 3  # the dead-man's switch hears from the ticks only
    assert finding.rule == "idle_gpu"


def test_a_wake_for_a_decision_on_listed_state_lists_every_account_first() -> None:
    # max_runtime's warning point (3m30s - 1m after the first sighting) falls between two
    # ticks: the wake for it lists the accounts before it evaluates (docs/safety.md: a wake
    # acts on listed state only from a listing that covers the instant).
    scenario = parse_scenario(tomllib.loads(SCENARIO))
    base = Settings(watchdog=WatchdogSection(mode="enforce"))
    ttl = MaxRuntimeConfig(limit=timedelta(minutes=3, seconds=30), warn_before=timedelta(minutes=1))
    base = base.model_copy(update={"rules": base.rules.model_copy(update={"max_runtime": ttl})})
    with simulation(scenario, base) as sim:
        waker = RecordingWaker(sim.clock)
        progress = Progress(sim.clock)
        jobs = Jobs(
            sim.assembly.watchdog,
            sim.clock,
            progress,
            poll_interval=timedelta(seconds=60),
            wakes=Wakes(),
            waker=waker,
        )
        for minute in range(3):  # ticks at 0, 60 and 120 s
            sim.clock.set(scenario.start + minute * timedelta(seconds=60))
            jobs.poll("vast-main")
            jobs.probe()
            jobs.evaluate()
        wake = waker.asked[-1]
        assert wake == scenario.start + timedelta(seconds=150)  # at itself: no rows to wait for
        assert jobs.wakes is not None
        assert jobs.wakes.listing

        sim.clock.set(wake)
        report = jobs.wake()
        polls = progress.stats(poll_job_id("vast-main"))
        listed = sim.assembly.watchdog.load_view(wake).accounts["vast-main"]

    assert polls.successes == 4  # three ticks and the wake
    assert listed.last_poll_ok_at == wake
    assert report is not None
    assert report.plan is not None
    assert [(d.finding.rule, d.status) for d in report.plan.decisions] == [
        ("max_runtime", PlanStatus.WARN)
    ]
