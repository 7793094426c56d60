"""Benchmark: a simulated day of a dozen instances, as ``watchdog-gpu simulate`` runs it.

``bench/scenarios/dozen_day.toml``: 3 accounts (Vast.ai, RunPod, Lambda) × 4 instances × 2 GPUs,
24 h at one tick a minute (1,441 ticks). Every instance trains at 90 % and goes idle after 2, 5, 8
or 11 h; the idle rule destroys it about 30 minutes later, so the fleet shrinks from 12 running
instances to none over the first half of the day. Each tick is the real engine (poll → probe →
evaluate → act → deliver) over the in-process provider transports, the fake SSH runner and a
SQLite file on a virtual clock. Measures:

- the in-process run: setup (migrations, wiring), every tick, the result;
- the time of one tick while all 12 instances run, and over the whole day;
- the whole ``watchdog-gpu simulate --scenario ... --json`` command (interpreter start, imports
  and JSON included) in a child process;
- peak RSS (``ru_maxrss``) of the in-process run and of the command.

Run from the repository root::

    .venv/bin/python -m bench.bench_simulate [--scenario PATH] [--no-cli] [--write-readme]

``--write-readme`` replaces this benchmark's figures in ``bench/README.md``. Not a test: nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from watchdog_gpu.sim.scenario import Scenario, load_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "bench" / "scenarios" / "dozen_day.toml"
README = ROOT / "bench" / "README.md"
CLI = ROOT / ".venv" / "bin" / "watchdog-gpu"


@dataclass
class SimulateFigures:
    ticks: int
    setup_s: float
    run_s: float
    result_s: float
    tick_ms_all_running: float
    tick_ms_mean: float
    tick_ms_max: float
    rss_mib: float
    cli_s: float | None = None
    cli_rss_mib: float | None = None

    @property
    def total_s(self) -> float:
        return self.setup_s + self.run_s + self.result_s


def running_count(scenario: Scenario, sim: Simulation) -> int:
    return sum(
        1
        for account in scenario.accounts
        for instance in account.instances
        if sim.world.state(account.name, instance.id) == "running"
    )


def run_in_process(scenario: Scenario) -> SimulateFigures:
    everyone = sum(len(account.instances) for account in scenario.accounts)
    started = time.perf_counter()
    with simulation(scenario) as sim:
        ready = time.perf_counter()
        all_running: list[float] = []
        every: list[float] = []
        while not sim.finished:
            full = running_count(scenario, sim) == everyone
            before = time.perf_counter()
            sim.step()
            took = time.perf_counter() - before
            every.append(took)
            if full:
                all_running.append(took)
        ran = time.perf_counter()
        sim.result().to_json()
        done = time.perf_counter()
    return SimulateFigures(
        ticks=len(every),
        setup_s=ready - started,
        run_s=ran - ready,
        result_s=done - ran,
        # The first ticks create the database rows; the median is the steady cost.
        tick_ms_all_running=1000 * statistics.median(all_running) if all_running else 0.0,
        tick_ms_mean=1000 * statistics.fmean(every),
        tick_ms_max=1000 * max(every),
        rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def run_cli(path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``watchdog-gpu simulate --scenario PATH --json``."""
    started = time.perf_counter()
    subprocess.run(
        [str(CLI), "simulate", "--scenario", str(path), "--json"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    took = time.perf_counter() - started
    return took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def table(figures: SimulateFigures) -> str:
    rows = [
        ("ticks", f"{figures.ticks}"),
        ("one tick, 12 instances running (median)", f"{figures.tick_ms_all_running:.1f} ms"),
        ("one tick, mean over the day", f"{figures.tick_ms_mean:.1f} ms"),
        ("slowest tick", f"{figures.tick_ms_max:.1f} ms"),
        ("setup (migrations, wiring)", f"{figures.setup_s:.2f} s"),
        ("all ticks", f"{figures.run_s:.2f} s"),
        ("in-process total", f"{figures.total_s:.2f} s"),
        ("peak RSS, in-process", f"{figures.rss_mib:.0f} MiB"),
    ]
    if figures.cli_s is not None and figures.cli_rss_mib is not None:
        rows += [
            ("`watchdog-gpu simulate --json` (whole command)", f"{figures.cli_s:.2f} s"),
            ("peak RSS, command", f"{figures.cli_rss_mib:.0f} MiB"),
        ]
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def machine() -> str:
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU cores"
    )


def write_readme_block(name: str, body: str, readme: Path = README) -> None:
    """Replace the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in
    ``readme`` (appended at the end when the markers are missing)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = readme.read_text(encoding="utf-8") if readme.exists() else "# Benchmarks\n"
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    readme.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--no-cli", action="store_true", help="skip the whole-command run")
    parser.add_argument("--write-readme", action="store_true", help="update bench/README.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    scenario = load_scenario(args.scenario)
    figures = run_in_process(scenario)
    if not args.no_cli:
        figures.cli_s, figures.cli_rss_mib = run_cli(args.scenario)
    report = table(figures)
    print(report)
    if args.write_readme:
        stamp = datetime.now(UTC).date().isoformat()  # noqa: TID251 - a benchmark reads real time
        body = f"Measured {stamp} on {machine()} (`{args.scenario.name}`):\n\n{report}"
        write_readme_block("bench_simulate", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
