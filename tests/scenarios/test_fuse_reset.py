"""Scenario: a human resets the tripped fuse (fuse_trip.toml), and the held destroys go ahead.

The fuse holds all ten due destroys and latches. ``watchdog-gpu fuse reset`` cancels the held
actions and clears the latch; the next tick re-plans them from fresh findings (the limit is still
exceeded) and, released by a human, destroys them — under the same idempotency keys, so nothing
is ever destroyed twice.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.scenarios.helpers import ENFORCE, finish, offset, simulating

RULES = '[rules.max_runtime]\nlimit = "40m"\nwarn_before = "10m"\n'
CONFIG = f"{ENFORCE}\n[safety]\nmax_fleet_fraction = 0.5\n{RULES}"
AFTER_TRIP = timedelta(seconds=offset("55m"))


def test_after_a_fuse_reset_the_held_destroys_go_ahead_once_each(tmp_path: Path) -> None:
    with simulating("fuse_trip", tmp_path, CONFIG) as sim:
        while sim.next_tick <= sim.scenario.start + AFTER_TRIP:
            sim.step()
        assert sim.store.fuse_latched()
        cancelled = sim.store.reset_fuse(sim.clock.now(), who="test")
        assert cancelled == 10
        assert not sim.store.fuse_latched()
        run = finish(sim)
    assert sorted(action["result"] for action in run.actions) == ["verified"] * 10
    destroyed = [call[2] for call in run.api_calls]
    assert len(destroyed) == 10
    assert len(set(destroyed)) == 10  # one destroy call per instance, never two
    assert all(call[0] > offset("55m") for call in run.api_calls)
    assert all(figures["final_state"] == "gone" for figures in run.instances.values())
