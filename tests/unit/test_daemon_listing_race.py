"""The listing at the call, on the daemon's own jobs (``docs/safety.md``, "The listing at the
call"): the act job runs after the poll its evaluation read, by up to a poll interval. Here each
account is polled at :00 and evaluated and acted on at :30, as the scheduler spaces them; an
interruptible instance paused for longer than ``after`` is destroyed at the pass that finds it
overdue — unless it resumed between that poll and that act, when the call must not be made."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from watchdog_gpu.jobs import Jobs, Progress
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

POLL = timedelta(seconds=60)
ACT_AFTER_POLL = timedelta(seconds=30)


def paused_sweep(extra_events: str = "") -> str:
    """A Vast interruptible instance, running, then paused at 5 min (the rule's ``after`` is
    30 min and its warning 10 min before: the documented defaults)."""
    return f"""
name = "listing-race"
start = "2026-03-02T20:00:00Z"
duration = "2h"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 50.0

[[accounts.instances]]
id = "101"
name = "sweep"
interruptible = true
compute_usd_per_hour = 0.30
disk_gb = 20
storage_usd_per_gb_month = 0.10
events = [
  {{ at = "0s", state = "running", gpu_util = 90 }},
  {{ at = "5m", state = "paused" }},{extra_events}
]
"""


def run_passes(sim: Simulation, minutes: int) -> Iterator[tuple[datetime, datetime]]:
    """Poll every account at each minute, then evaluate and act 30 s later: yields (poll
    instant, act instant) after each pass."""
    jobs = Jobs(sim.assembly.watchdog, sim.clock, Progress(sim.clock), poll_interval=POLL)
    for _ in range(minutes):
        polled_at = sim.clock.now()
        for account in sim.assembly.watchdog.providers:
            jobs.poll(account)
        jobs.probe()
        sim.clock.sleep(ACT_AFTER_POLL.total_seconds())
        acted_at = sim.clock.now()
        jobs.evaluate()
        jobs.act()
        jobs.deliver()
        yield polled_at, acted_at
        sim.clock.sleep((POLL - ACT_AFTER_POLL).total_seconds())


def destroyed_at(sim: Simulation) -> datetime | None:
    calls = [a for a in sim.world.actions() if a.action == "destroy" and a.instance_id == "101"]
    return calls[0].at if calls else None


def minute_of_the_kill() -> tuple[datetime, datetime]:
    """The pass (poll instant, act instant) at which the still-paused instance is destroyed."""
    with simulation(parse_scenario(paused_sweep())) as sim:
        for polled_at, acted_at in run_passes(sim, 60):
            if destroyed_at(sim) is not None:
                return polled_at, acted_at
    raise AssertionError("the paused interruptible instance was never destroyed")


def test_a_paused_interruptible_instance_is_destroyed_by_the_act_job_once_overdue() -> None:
    with simulation(parse_scenario(paused_sweep())) as sim:
        start = sim.clock.now()
        acts = [acted for _, acted in run_passes(sim, 40)]
        killed = destroyed_at(sim)
        assert killed is not None
        assert killed in acts  # by the act job of a pass
        # Paused at 5:00, seen paused by the poll at 5:00: due at 35:00, acted on at 35:30.
        assert killed - start == timedelta(minutes=35, seconds=30)
        sim.clock.sleep(300)  # the provider's destroy delay
        assert sim.world.state("vast-main", "101") == "gone"


def test_an_instance_resumed_between_the_poll_and_the_act_is_not_destroyed() -> None:
    polled_at, acted_at = minute_of_the_kill()
    resumed = polled_at + (acted_at - polled_at) / 2  # after the listing the decision reads
    start = datetime.fromisoformat("2026-03-02T20:00:00+00:00")
    offset = int((resumed - start).total_seconds())
    scenario = paused_sweep(f'\n  {{ at = "{offset}s", state = "running", gpu_util = 90 }},')

    with simulation(parse_scenario(scenario)) as sim:
        for _ in run_passes(sim, 45):
            pass
        assert destroyed_at(sim) is None
        assert sim.world.state("vast-main", "101") == "running"
        kinds = [event.kind for event in sim.store.list_audit_events(instance_id="101")]
        # The action the evaluation at the kill pass planned waited for a newer listing at the
        # call, and the next evaluation (which read the running instance) dropped it.
        assert "action_waits" in kinds
        assert kinds.index("action_waits") < kinds.index("action_cancelled")
        assert "provider_called" not in kinds
