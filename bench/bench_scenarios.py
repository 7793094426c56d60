"""Benchmark: dollars wasted per scenario, against the baseline of no watchdog at all.

Runs every scenario of ``tests/scenarios/*.toml`` through the real engine (as
``watchdog-gpu simulate`` does, documented defaults in enforce mode) and prints, per scenario:
what the simulated providers billed with the watchdog, what the same script costs with nobody
acting, the difference, and the actions taken. For the forgotten-idle scenario it also measures
the detection latency: how long after its idle limit (``idle`` after the GPU went idle)
the destroy was decided and verified — the overshoot the product promises to keep within a tick.

Run from the repository root::

    .venv/bin/python -m bench.bench_scenarios

Not a test: it asserts nothing. The figures go into bench/README.md by hand.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from watchdog_gpu.sim.scenario import load_scenario
from watchdog_gpu.sim.simulate import simulation

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "scenarios"
# forgotten_idle.toml: the GPU goes idle at 30 min; idle_gpu's default limit is 30 min.
FORGOTTEN_IDLE_LIMIT_S = 60 * 60


def main() -> None:
    logging.getLogger("watchdog_gpu").setLevel(logging.CRITICAL)
    print(f"{'scenario':<26} {'with $':>8} {'without $':>10} {'saved $':>8}  seconds  actions")
    for path in sorted(SCENARIOS.glob("*.toml")):
        scenario = load_scenario(path)
        started = time.perf_counter()
        with simulation(scenario) as sim:
            result = sim.run().to_json()
        elapsed = time.perf_counter() - started
        totals = result["totals"]
        actions = ", ".join(
            f"{a['action']} {a['instance']} ({a['rule']}, {a['result']})" for a in result["actions"]
        )
        print(
            f"{path.stem:<26} {totals['spend_usd']:>8.2f} "
            f"{totals['spend_without_watchdog_usd']:>10.2f} {totals['saved_usd']:>8.2f}  "
            f"{elapsed:>7.1f}  {actions or '-'}"
        )
        if path.stem == "forgotten_idle":
            (action,) = result["actions"]
            decided = action["offset_s"] - FORGOTTEN_IDLE_LIMIT_S
            verified = action.get("verified_offset_s", action["offset_s"]) - FORGOTTEN_IDLE_LIMIT_S
            print(
                f"{'':<26} detection latency: decided {decided:+d} s, verified gone "
                f"{verified:+d} s after the idle limit (tick {scenario.tick.total_seconds():.0f} s)"
            )


if __name__ == "__main__":
    main()
