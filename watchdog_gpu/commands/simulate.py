"""``watchdog-gpu simulate --scenario FILE [--config FILE] [--json] [--db PATH]``.

Runs the real observe → record → decide → act path against the simulated world of a scenario on
a virtual clock (``docs/scenario-format.md``) and prints the outcome: with ``--json`` the one JSON
object of the scenario-format contract, otherwise a readable summary. On a terminal, stderr shows
the progress meanwhile (simulated time, actions so far). Without ``--config`` every
rule runs with its documented defaults in enforce mode; with it, that file's ``[rules]``,
``[safety]`` and mode apply (accounts come from the scenario, no keys needed). ``--db`` keeps the
database of the run (for ``watchdog-gpu status --db`` / ``events --db``).

Exit codes: 0 the run completed; 2 an invalid scenario, configuration or argument.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from watchdog_gpu.cli import EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.config import ConfigError, Settings, load_settings
from watchdog_gpu.durations import format_duration
from watchdog_gpu.errors import ScenarioError
from watchdog_gpu.gc_freeze import long_lived_frozen
from watchdog_gpu.sim.scenario import Scenario, load_scenario
from watchdog_gpu.sim.simulate import Simulation, SimulationResult, simulation


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help=summary("simulate"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument("--scenario", type=Path, required=True, metavar="FILE")
    parser.add_argument("--config", type=Path, metavar="FILE", help="take rules/safety/mode")
    parser.add_argument("--json", action="store_true", help="print the JSON contract")
    parser.add_argument("--db", type=Path, metavar="PATH", help="keep the run's database here")
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
        base = load_settings(args.config, os.environ) if args.config is not None else None
    except ScenarioError as error:
        _print_problems(args.scenario, error.problems)
        return EXIT_USAGE
    except ConfigError as error:
        _print_problems(args.config, error.problems)
        return EXIT_USAGE
    if args.db is not None and args.db.exists():
        print(f"--db {args.db}: the file exists; choose a new path", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = _run(scenario, base, args.db)
    except ConfigError as error:  # what the scenario's providers cannot do
        _print_problems(args.config or args.scenario, error.problems)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_summary(result.to_json())
    return EXIT_OK


def _print_problems(source: Path, problems: Iterable[object]) -> None:
    for problem in problems:
        print(f"{source}: {problem}", file=sys.stderr)


def _run(scenario: Scenario, base: Settings | None, database: Path | None) -> SimulationResult:
    """The scenario played to its end, its progress shown on a terminal's stderr."""
    # As the daemon after its start-up and between its jobs (gc_freeze.py): a day at 1,000
    # instances is thousands of ticks.
    with (
        _engine_logs_quiet(),
        simulation(scenario, base, database=database) as sim,
        long_lived_frozen(),
        sim.collecting(),
    ):
        progress = Progress(sys.stderr, scenario.end - scenario.start)
        result = sim.run(on_step=progress.show if progress.enabled else None)
        progress.done()
    return result


@contextmanager
def _engine_logs_quiet() -> Iterator[None]:
    """The run's own decisions are the output; engine logs would only interleave with it. Put
    back afterwards: in-process callers (tests, tools) keep their own logging."""
    package_logger = logging.getLogger("watchdog_gpu")
    previous_level = package_logger.level
    package_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        package_logger.setLevel(previous_level)


class Progress:
    """One line on a terminal's stderr, rewritten as the run goes: the simulated time, the share
    of the scenario and the actions so far; erased at the end. Nothing when stderr is not a
    terminal (a pipe, a file, CI), so the output stays the same there."""

    # Redraw at most this often (real seconds): counting the actions reads the database.
    EVERY_SECONDS = 0.25

    def __init__(self, stream: TextIO, length: timedelta) -> None:
        self.stream = stream
        self.length = length
        self.enabled = stream.isatty()
        self._shown_at: float | None = None
        self._width = 0

    def show(self, sim: Simulation) -> None:
        now = time.monotonic()
        if self._shown_at is not None and now - self._shown_at < self.EVERY_SECONDS:
            return
        self._shown_at = now
        elapsed = min(sim.elapsed, self.length)
        share = elapsed / self.length if self.length > timedelta(0) else 1.0
        actions = sim.actions_so_far()
        text = (
            f"simulated {format_duration(elapsed)} of {format_duration(self.length)} "
            f"({share:.0%}), {actions} action{'s' if actions != 1 else ''} so far"
        )
        self._write(text)

    def done(self) -> None:
        if self.enabled and self._width:
            self._write("")

    def _write(self, text: str) -> None:
        padding = " " * max(0, self._width - len(text))
        self.stream.write(f"\r{text}{padding}" + ("\r" if not text else ""))
        self.stream.flush()
        self._width = len(text)


def print_summary(data: dict[str, Any]) -> None:
    print(f"scenario {data['scenario']} ({data['mode']} mode)")
    print("\nactions:")
    for action in data["actions"] or [{"none": True}]:
        if "none" in action:
            print("  none")
            continue
        print(
            f"  +{_hms(action['offset_s'])}  {action['action']:<8} "
            f"{action['account']}/{action['instance']:<12} {action['rule']:<22} {action['result']}"
        )
    print("\nnotifications:")
    for note in data["notifications"]:
        print(f"  +{_hms(note['offset_s'])}  {note['severity']:<8} {note['title']}")
    print("\ninstances:")
    for key, figures in data["instances"].items():
        print(
            f"  {key:<28} {figures['final_state']:<10} spent ${figures['spend_usd']:.2f}"
            f"  (without watchdog ${figures['spend_without_watchdog_usd']:.2f})"
        )
    totals = data["totals"]
    print(
        f"\ntotal: spent ${totals['spend_usd']:.2f}, without watchdog "
        f"${totals['spend_without_watchdog_usd']:.2f}, saved ${totals['saved_usd']:.2f}"
    )


def _hms(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


__all__ = ["SimulationResult", "register", "run_simulate"]
