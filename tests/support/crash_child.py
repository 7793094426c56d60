"""A simulation that survives SIGKILL: the child process of the crash-resume test.

Run as ``python tests/support/crash_child.py SCENARIO WORKDIR``. Everything that must outlive the
process is in WORKDIR:

- ``watchdog.db``: the engine's SQLite store (what the daemon would keep);
- ``world.journal``: every stop/destroy call the simulated provider received, appended and
  fsynced *before* the world applies it. A restarted child rebuilds the world by replaying it,
  so the provider's side survives the kill exactly as a real provider's would. The test counts
  destroy calls from it;
- ``delivered.journal``: the idempotency key of every notification handed to the (fake) phone,
  fsynced before the delivery is reported, so the test can check that nothing was lost;
- ``progress``: the offset of the last completed tick (written atomically). A restart resumes
  with the tick after it, as a daemon restarted by systemd resumes at the next interval.

The parent kills this process at random moments and starts it again until it prints ``DONE``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.model import PlannedNotification
from watchdog_gpu.notify.delivery import DeliveryResult
from watchdog_gpu.sim.scenario import Scenario, load_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation_settings
from watchdog_gpu.sim.world import SimulatedWorld


def append_durably(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


class JournaledWorld(SimulatedWorld):
    """A world whose stop/destroy calls are journaled before they take effect."""

    journal: Path | None = None

    def destroy(self, account: str, instance_id: str) -> bool:
        if self.journal is not None:
            append_durably(
                self.journal, f"{self.now().isoformat()} destroy {account} {instance_id}"
            )
        return super().destroy(account, instance_id)

    def stop(self, account: str, instance_id: str) -> None:
        if self.journal is not None:
            append_durably(self.journal, f"{self.now().isoformat()} stop {account} {instance_id}")
        super().stop(account, instance_id)


class JournaledDelivery:
    def __init__(self, path: Path) -> None:
        self.path = path

    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        # A batch (several messages due in one delivery pass, e.g. those a new leader finds
        # undelivered after a kill) reaches the phone as one push carrying each message.
        keys = [item.idempotency_key for item in notification.items or (notification,)]
        append_durably(self.path, "\n".join(keys))
        return DeliveryResult(ok=True, detail="journaled", routed=True)


def rebuild_world(scenario: Scenario, clock: VirtualClock, journal: Path) -> JournaledWorld:
    """The world as the provider has it: the scenario plus every call it received, replayed."""
    world = JournaledWorld(scenario, clock)
    if journal.exists():
        for line in journal.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue  # a line cut by the kill was never acted on
            at, kind, account, instance_id = parts
            instant = datetime.fromisoformat(at)
            if instant > clock.now():
                clock.set(instant)
            if kind == "destroy":
                world.destroy(account, instance_id)
            else:
                world.stop(account, instance_id)
    world.journal = journal
    return world


def resume_night(
    scenario_path: str,
    work: Path,
    *,
    database_url: str | None = None,
    before_tick: Callable[[Simulation], None] | None = None,
) -> None:
    """Run the night from where the last process left it (``progress``, ``world.journal``) to
    its end; ``database_url`` replaces ``WORKDIR/watchdog.db`` and ``before_tick`` runs before
    every tick (the failover child checks its leadership there)."""
    scenario = load_scenario(scenario_path)
    progress = work / "progress"
    first_tick = scenario.start
    if progress.exists():
        first_tick = scenario.start + timedelta(seconds=int(progress.read_text())) + scenario.tick
    clock = VirtualClock(scenario.start)
    world = rebuild_world(scenario, clock, work / "world.journal")
    sim = Simulation(
        scenario,
        simulation_settings(scenario, None),
        work / "watchdog.db",
        clock=clock,
        world=world,
        delivery=JournaledDelivery(work / "delivered.journal"),
        first_tick=max(first_tick, clock.now()),
        database_url=database_url,
    )
    while not sim.finished:
        if before_tick is not None:
            before_tick(sim)
        sim.step()
        offset = int((sim.next_tick - scenario.tick - scenario.start).total_seconds())
        temporary = progress.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(str(offset))
        os.replace(temporary, progress)
    sim.close()


def main(scenario_path: str, workdir: str) -> int:
    resume_night(scenario_path, Path(workdir))
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
