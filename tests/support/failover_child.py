"""One of two watchdogs sharing a PostgreSQL database: the child process of the failover test.

Run as ``python tests/support/failover_child.py SCENARIO WORKDIR DATABASE_URL NODE [LEASE]``.
It stands by (deposing a leader silent for LEASE seconds, default 30) until it leads
(``store/leadership.py``: the advisory lock and the epoch), writes
``<node> <epoch> <monotonic seconds>`` to ``WORKDIR/leaders.journal``, then runs the simulated
night from where the previous leader left it, exactly as ``crash_child.py`` resumes after a
kill: the provider's side from ``world.journal``, the next tick from ``progress``, the phone's
deliveries appended to ``delivered.journal``. Its store is fenced with its epoch, and it checks
its leadership before every tick (a real daemon checks it every few seconds).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from tests.support.crash_child import append_durably, resume_night
from watchdog_gpu.sim.simulate import Simulation
from watchdog_gpu.store.leadership import PostgresLeadership


def main(scenario_path: str, workdir: str, database_url: str, node: str, lease: str = "30") -> int:
    work = Path(workdir)
    leadership = PostgresLeadership(database_url, role="run", node=node, database="test")
    stop = threading.Event()
    if not leadership.wait_for_leadership(stop, retry_seconds=0.05, lease_seconds=float(lease)):
        return 1
    assert leadership.epoch is not None
    append_durably(work / "leaders.journal", f"{node} {leadership.epoch} {time.monotonic():.3f}")

    def still_leading(sim: Simulation) -> None:
        leadership.check()  # raises LeadershipLostError: this process stops acting
        if sim.store.fence is None:
            sim.assembly.fence_provider_calls()  # as the daemon does (wiring.Assembly)
        sim.store.fence = leadership.fence

    resume_night(scenario_path, work, database_url=database_url, before_tick=still_leading)
    leadership.release()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
