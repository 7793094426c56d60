"""Scenarios: the day's budget counts what providers charge — volumes and filesystems on all
three providers (budget_volumes.toml) and a Vast reserved instance at its discounted rate
(vast_reserved.toml) — and the watchdog's ledger agrees with what the simulated providers
billed, to the cent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import ENFORCE, Run, finish, load, simulating, tick_seconds
from watchdog_gpu.spend import period_spend

# Storage is priced per month: 720 h on Vast and Lambda, 730 h on RunPod.
MONTH_HOURS = {"vast": 720.0, "runpod": 730.0, "lambda": 720.0}


def run_with_ledger(
    name: str, tmp_path: Path, config: str
) -> tuple[Run, dict[str, float], dict[str, float]]:
    """The run, and per account what the ledger counts over the scenario and what the
    simulated provider billed (instances and volumes)."""
    with simulating(name, tmp_path, config) as sim:
        run = finish(sim)
        start, end = sim.scenario.start, sim.clock.now()
        view = sim.store.load_fleet_view(end, end - start, start)
        names = [account.name for account in sim.scenario.accounts]
        ledger = {n: period_spend(view, start, end, accounts=(n,)).usd for n in names}
        billed = {n: sim.world.account_view(n).total_spend_usd for n in names}
        return run, ledger, billed


def test_volumes_and_filesystems_count_in_the_day_budget_on_every_provider(
    tmp_path: Path,
) -> None:
    daily_usd = 18.0
    config = f"{ENFORCE}\n[rules.budget]\ndaily_usd = {daily_usd}\n"
    run, ledger, billed = run_with_ledger("budget_volumes", tmp_path, config)

    scenario = load("budget_volumes")
    instances = sum(i.compute_usd_per_hour for a in scenario.accounts for i in a.instances)
    volumes = sum(
        v.size_gb * v.storage_usd_per_gb_month / MONTH_HOURS[a.provider]
        for a in scenario.accounts
        for v in a.volumes
    )
    crossing_s = daily_usd / (instances + volumes) * 3600
    assert crossing_s < scenario.duration.total_seconds() < daily_usd / instances * 3600
    destroys = [a for a in run.actions if (a["rule"], a["action"]) == ("budget", "destroy")]
    assert sorted(f"{a['account']}/{a['instance']}" for a in destroys) == sorted(run.instances)
    tick = tick_seconds("budget_volumes")
    for action in destroys:
        assert crossing_s <= action["offset_s"] <= crossing_s + tick
    for account, usd in billed.items():
        assert ledger[account] == pytest.approx(usd, abs=0.005), account


def test_a_reserved_vast_instance_counts_at_the_rate_vast_charges(tmp_path: Path) -> None:
    config = f"{ENFORCE}\n[rules.budget]\ndaily_usd = 6.0\n"
    run, ledger, billed = run_with_ledger("vast_reserved", tmp_path, config)

    # Ten hours at $0.50/h (0.80 listed, 37.5 % off): $5.00, under the $6 ceiling.
    assert billed["vast-main"] == pytest.approx(5.00, abs=0.005)
    assert ledger["vast-main"] == pytest.approx(billed["vast-main"], abs=0.005)
    assert run.actions == []
    assert run.instances["vast-main/9401"]["final_state"] == "running"
