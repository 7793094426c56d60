"""Benchmark: dollars spent with the watchdog against an oracle, and overshoot per destroy.

For each scenario of ``bench/scenarios/`` (outages, a wave of 30 idle instances, TTLs between
ticks) and its configuration, this runs the real engine as ``watchdog-gpu simulate`` does and
compares it with an **oracle** that destroys each instance exactly at its rule's limit — the
idle limit (idle onset + ``idle_minutes``), the TTL (start + ``max_runtime``'s limit) or the
budget crossing — with no tick, no provider delay and no outage in its way. The oracle's
dollars are the same simulated world replayed with each instance scripted ``gone`` at its limit.

Printed per scenario: dollars with the watchdog, with the oracle, with no watchdog; the excess
over the oracle (target: within 1 %); and per destroy the overshoot past the limit, both as
decided (the action's offset − the limit) and as billed (the extra dollars over the oracle ÷ the
instance's rate: decision + provider delay), median and worst (target: ≤ 60 s).

Run from the repository root::

    .venv/bin/python -m bench.bench_oracle

Not a test: it asserts nothing. The figures go into bench/README.md by hand.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.config import load_settings
from watchdog_gpu.durations import parse_duration
from watchdog_gpu.sim.scenario import Scenario, parse_scenario
from watchdog_gpu.sim.simulate import simulation
from watchdog_gpu.sim.world import SimulatedWorld

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
TESTS = Path(__file__).resolve().parents[1] / "tests" / "scenarios"
ENFORCE = '[watchdog]\nmode = "enforce"\n'
IDLE_LIMIT_S = 30 * 60  # idle_gpu's documented default idle_minutes
OVERSHOOT_TARGET_S = 60
MONTH_HOURS = {"vast": 720.0, "runpod": 730.0, "lambda": 730.0}

Limits = dict[str, float]  # "account/id" → offset (s) at which the oracle destroys it


@dataclass(frozen=True)
class Case:
    label: str
    scenario: Path
    config: str  # the --config file's text
    limits: Callable[[dict[str, Any]], Limits]


def idle_limits(data: dict[str, Any]) -> Limits:
    """Each instance whose GPU goes idle (a ``gpu_util = 0`` event after a busy start) is due
    ``IDLE_LIMIT_S`` after that event."""
    limits: Limits = {}
    for account in data["accounts"]:
        for instance in account.get("instances", ()):
            for event in instance.get("events", ()):
                if event.get("gpu_util") == 0:
                    onset = parse_duration(event["at"]).total_seconds()
                    limits[f"{account['name']}/{instance['id']}"] = onset + IDLE_LIMIT_S
                    break
    return limits


def ttl_limits(limit_s: float) -> Callable[[dict[str, Any]], Limits]:
    """Each instance is due ``limit_s`` after its first ``running`` event (max_runtime)."""

    def limits(data: dict[str, Any]) -> Limits:
        found: Limits = {}
        for account in data["accounts"]:
            for instance in account.get("instances", ()):
                for event in instance.get("events", ()):
                    if event.get("state") == "running":
                        start = parse_duration(event["at"]).total_seconds()
                        found[f"{account['name']}/{instance['id']}"] = start + limit_s
                        break
        return found

    return limits


def running_rate(provider: str, instance: dict[str, Any]) -> float:
    disk = float(instance.get("disk_gb", 0))
    storage = disk * float(instance.get("storage_usd_per_gb_month", 0))
    return float(instance["compute_usd_per_hour"]) + storage / MONTH_HOURS[provider]


def budget_limits(daily_usd: float) -> Callable[[dict[str, Any]], Limits]:
    """Every instance runs from 0 at a constant rate: the day's spend reaches ``daily_usd`` at
    ``daily_usd / total rate``, and every instance is destroyed then."""

    def limits(data: dict[str, Any]) -> Limits:
        rates = {
            f"{account['name']}/{instance['id']}": running_rate(account["provider"], instance)
            for account in data["accounts"]
            for instance in account.get("instances", ())
        }
        crossing = daily_usd / sum(rates.values()) * 3600
        return dict.fromkeys(rates, crossing)

    return limits


# The fuse's limits opened wide: how close the watchdog itself comes to the oracle on the wave
# when the blast-radius policy does not hold it back.
NO_FUSE = (
    "[safety]\nmax_actions_per_tick = 50\nmax_actions_per_hour = 100\nmax_fleet_fraction = 1.0\n"
)
CASES = (
    Case("forgotten_idle (tests/scenarios)", TESTS / "forgotten_idle.toml", ENFORCE, idle_limits),
    Case("wave_30_idle", SCENARIOS / "wave_30_idle.toml", ENFORCE, idle_limits),
    Case(
        "wave_30_idle, fuse opened",
        SCENARIOS / "wave_30_idle.toml",
        f"{ENFORCE}\n{NO_FUSE}",
        idle_limits,
    ),
    Case("idle_during_outage", SCENARIOS / "idle_during_outage.toml", ENFORCE, idle_limits),
    Case(
        "budget_during_outage",
        SCENARIOS / "budget_during_outage.toml",
        f"{ENFORCE}\n[rules.budget]\ndaily_usd = 30.0\n",
        budget_limits(30.0),
    ),
    Case(
        "ttl_between_ticks (max_runtime 2h30s)",
        SCENARIOS / "ttl_between_ticks.toml",
        f'{ENFORCE}\n[rules.max_runtime]\nlimit = "2h30s"\nwarn_before = "10m"\n',
        ttl_limits(2 * 3600 + 30),
    ),
)


def oracle_spend(data: dict[str, Any], limits: Limits) -> dict[str, float]:
    """What each instance bills when it is ``gone`` exactly at its limit (no watchdog)."""
    scripted: dict[str, Any] = dict(data, accounts=[])
    for account in data["accounts"]:
        copy = dict(account, instances=[])
        for instance in account.get("instances", ()):
            key = f"{account['name']}/{instance['id']}"
            events = list(instance.get("events", ()))
            if key in limits:
                events.append({"at": f"{limits[key]:.3f}s", "state": "gone"})
            copy["instances"].append(dict(instance, events=events))
        scripted["accounts"].append(copy)
    scenario = parse_scenario(scripted)
    clock = VirtualClock(scenario.start)
    world = SimulatedWorld(scenario, clock)
    clock.set(scenario.end)
    return {
        f"{account.name}/{instance.id}": world.spend_usd(account.name, instance.id)
        for account in scenario.accounts
        for instance in account.instances
    }


@dataclass(frozen=True)
class Outcome:
    with_usd: float
    oracle_usd: float
    without_usd: float
    decided_overshoot_s: list[float]
    billed_overshoot_s: list[float]
    not_destroyed: list[str]
    actions: int
    seconds: float


def run_case(case: Case, scratch: Path) -> Outcome:
    data = tomllib.loads(case.scenario.read_text(encoding="utf-8"))
    scenario: Scenario = parse_scenario(data)
    limits = case.limits(data)
    config = scratch / "config.toml"
    config.write_text(case.config, encoding="utf-8")
    started = time.perf_counter()
    with simulation(scenario, load_settings(config, {})) as sim:
        result = sim.run().to_json()
        world = sim.world
        spent = {
            f"{a.name}/{i.id}": world.spend_usd(a.name, i.id)
            for a in scenario.accounts
            for i in a.instances
        }
        without = {
            f"{a.name}/{i.id}": world.spend_without_watchdog_usd(a.name, i.id)
            for a in scenario.accounts
            for i in a.instances
        }
    elapsed = time.perf_counter() - started
    oracle = oracle_spend(data, limits)
    rates = {
        f"{account['name']}/{instance['id']}": running_rate(account["provider"], instance)
        for account in data["accounts"]
        for instance in account.get("instances", ())
    }
    destroys = {
        f"{a['account']}/{a['instance']}": a
        for a in result["actions"]
        if a["action"] == "destroy" and a["result"] == "verified"
    }
    decided: list[float] = []
    billed: list[float] = []
    missing: list[str] = []
    for key, limit in sorted(limits.items()):
        billed.append((spent[key] - oracle[key]) / rates[key] * 3600)
        if key in destroys:
            decided.append(destroys[key]["offset_s"] - limit)
        else:
            missing.append(key)
    return Outcome(
        with_usd=sum(spent.values()),
        oracle_usd=sum(oracle.values()),
        without_usd=sum(without.values()),
        decided_overshoot_s=decided,
        billed_overshoot_s=billed,
        not_destroyed=missing,
        actions=len(result["actions"]),
        seconds=elapsed,
    )


def describe(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.0f} s, worst {max(values):.0f} s"


def main() -> None:
    logging.getLogger("watchdog_gpu").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="bench-oracle-") as scratch:
        for case in CASES:
            outcome = run_case(case, Path(scratch))
            excess = outcome.with_usd - outcome.oracle_usd
            print(
                f"{case.label}: with ${outcome.with_usd:.2f}, oracle ${outcome.oracle_usd:.2f}, "
                f"no watchdog ${outcome.without_usd:.2f}; excess over the oracle "
                f"${excess:.2f} ({100 * excess / outcome.oracle_usd:+.2f} %); "
                f"{outcome.actions} actions; simulated in {outcome.seconds:.1f} s"
            )
            print(
                f"  overshoot per destroy: decided {describe(outcome.decided_overshoot_s)}; "
                f"billed {describe(outcome.billed_overshoot_s)} "
                f"(over {len(outcome.billed_overshoot_s)} instances)"
            )
            if outcome.not_destroyed:
                print(f"  not destroyed by the end: {', '.join(outcome.not_destroyed)}")
            late = [s for s in outcome.decided_overshoot_s if s > OVERSHOOT_TARGET_S]
            if late:
                print(f"  {len(late)} destroy(s) decided more than 60 s after the limit")


if __name__ == "__main__":
    main()
