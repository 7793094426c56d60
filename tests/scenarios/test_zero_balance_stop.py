"""Scenario: a stop at zero balance takes nothing out of the day (zero_balance_stop.toml).

A $10/h Vast instance bills 3 hours before its first sighting (its account's API fails); Vast
stops it at zero balance at about 3h30; a $4/h RunPod pod trains all along. With ``daily_usd =
60`` the day's spend reaches the ceiling at about 6h15 and the budget must act then. The
stretch billed before the first sighting is anchored once, at that sighting, from Vast's start
time: a stop (which clears that start time) must not take it back out of the day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from tests.scenarios.helpers import ENFORCE, Run, finish, simulating, tick_seconds
from watchdog_gpu.sim.simulate import Simulation
from watchdog_gpu.spend import day_start, period_spend

NAME = "zero_balance_stop"
DAILY_USD = 60.0
CONFIG = f"{ENFORCE}\n[rules.budget]\ndaily_usd = {DAILY_USD}\n"
VAST, RUNPOD = "vast-main/9301", "runpod-main/zb1pod00000001"
TICK = tick_seconds(NAME)


def day_spend(sim: Simulation) -> float:
    """The day's global spend as the watchdog's ledger has it now."""
    now = sim.clock.now()
    start = day_start(now, "UTC")
    view = sim.store.load_fleet_view(now, timedelta(hours=1), start)
    return period_spend(view, start, now).usd


@dataclass(frozen=True)
class Stepped:
    run: Run
    readings: list[tuple[datetime, float]]  # (after each tick, the day's spend)
    billed_usd: float  # what the simulated providers billed in all
    final_usd: float  # the ledger's day spend at the end


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> Stepped:
    readings: list[tuple[datetime, float]] = []
    with simulating(NAME, tmp_path_factory.mktemp(NAME), CONFIG) as sim:
        while not sim.finished:
            sim.step()
            readings.append((sim.clock.now(), day_spend(sim)))
        run = finish(sim)
        billed = sum(
            sim.world.account_view(n).total_spend_usd for n in ("vast-main", "runpod-main")
        )
        return Stepped(run, readings, billed, day_spend(sim))


def test_the_day_spend_never_goes_down_and_the_stop_leaves_it_whole(stepped: Stepped) -> None:
    readings = stepped.readings
    for (before_at, before), (after_at, after) in pairwise(readings):
        assert after >= before - 1e-9, (before_at, before, after_at, after)
    # After the first sighting (3h) the day holds the 3 hours billed before it, at $10/h.
    after_sighting = [usd for at, usd in readings if at >= readings[0][0] + timedelta(hours=3)]
    assert after_sighting[1] > 3 * 10.0 + 3 * 4.0


def test_the_day_ceiling_acts_when_the_day_spend_reaches_it(stepped: Stepped) -> None:
    run = stepped.run
    # Vast billed $35 (its balance) before the stop, plus its disk; RunPod $4/h from the start.
    disk = 20 * 0.18 / 720
    crossing_hours = (DAILY_USD - 35.0) / (4.0 + disk)
    (destroy,) = run.actions_for(RUNPOD)
    assert (destroy["rule"], destroy["action"]) == ("budget", "destroy")
    # Within a few ticks: the ledger bills the running rate up to the listing after the stop.
    assert abs(destroy["offset_s"] - crossing_hours * 3600) <= 3 * TICK
    assert run.instances[RUNPOD]["final_state"] == "gone"


def test_the_ledger_bills_what_the_providers_billed(stepped: Stepped) -> None:
    # The stop at zero balance falls between two listings: the ledger bills the running rate
    # until the listing that shows it stopped (pessimistic by at most one tick at $10/h).
    assert stepped.billed_usd - 0.01 <= stepped.final_usd
    assert stepped.final_usd <= stepped.billed_usd + 10.0 * TICK / 3600 + 0.01
