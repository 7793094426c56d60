"""Benchmark: the command line's start-up, as a user's shell runs it.

Times ``watchdog-gpu --help``, ``watchdog-gpu status --db FILE`` and ``watchdog-gpu status --config
FILE`` (a configuration naming that database: the loader, pydantic-settings and the rules'
models come in) as whole processes (start-up, imports and work), each run's CPU seconds (user +
system) from the OS's accounting of the finished child, and prints min / median / max. ``--db``
names a database to read (e.g. the one ``watchdog-gpu demo`` leaves, or a ``bench_daemon --db``
one: ``python -m bench.bench_daemon --hours 0.3 --speed 15 --db /tmp/status-1k.db`` for 1,000
instances); without it an empty one is created and migrated first.

Run from the repository root::

    .venv/bin/python -m bench.bench_cli_startup [--runs 7] [--db watchdog-gpu-demo.db]
    .venv/bin/python -m bench.bench_cli_startup --db FILE --before /tmp/main-tree   # A/B

``--before TREE`` times ``status --db`` of another checkout (say ``git archive main`` unpacked
in TREE) and of this one in turn, run after run, so both see the same load on a shared machine.
The children run in TREE's or this tree's root as their working directory: ``python -m`` puts
the working directory first on ``sys.path``, so from this repository's root both runs would
import this tree.

Not a test: nothing here asserts a speed (the targets are in bench/README.md).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu_seconds(argv: list[str], tree: Path | None = None) -> float:
    """CPU seconds (user + system) of one run of ``python -m watchdog_gpu ARGV`` (with the
    package of ``tree`` when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_GPU_")}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        env=env,
        cwd=tree,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compile_package() -> None:
    """Write the package's ``.pyc`` files, as ``pip install`` does for an installed copy. The
    warm-up run cannot be relied on for it: with ``PYTHONDONTWRITEBYTECODE`` set (as on the
    machine these figures were first taken on) an editable checkout compiles ~60 modules again
    in every run, ≈ 0.1 s of CPU a user of an installed copy never pays."""
    import watchdog_gpu

    compileall.compile_dir(Path(watchdog_gpu.__file__).parent, quiet=1)


def report(name: str, argv: list[str], runs: int) -> None:
    cpu_seconds(argv)  # warm-up: the OS's file cache
    figures = sorted(cpu_seconds(argv) for _ in range(runs))
    print(
        f"{name:<28} cpu s  min {figures[0]:.3f}  median {statistics.median(figures):.3f}  "
        f"max {figures[-1]:.3f}  ({runs} runs)"
    )


def compare(before: Path, argv: list[str], runs: int) -> None:
    """``argv`` of ``before``'s tree and of this one, interleaved (see the module's doc)."""
    trees = {"before": before.absolute(), "after": Path(__file__).resolve().parents[1]}
    compileall.compile_dir(trees["before"] / "watchdog_gpu", quiet=1)
    for tree in trees.values():
        cpu_seconds(argv, tree)  # warm-up
    figures: dict[str, list[float]] = {name: [] for name in trees}
    load = os.getloadavg()[0]
    for _ in range(runs):
        for name, tree in trees.items():
            figures[name].append(cpu_seconds(argv, tree))
    print(
        f"{' '.join(argv[:2])}, {runs} interleaved pairs, load average {load:.1f} → "
        f"{os.getloadavg()[0]:.1f}"
    )
    for name, values in figures.items():
        print(
            f"  {name:<7} cpu s  min {min(values):.3f}  median {statistics.median(values):.3f}  "
            f"max {max(values):.3f}  ({trees[name]})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--db", type=Path, help="database for status (default: a new empty one)")
    parser.add_argument(
        "--before", type=Path, help="a checkout to time status --db against, interleaved"
    )
    args = parser.parse_args()
    compile_package()
    if args.before is not None:
        if args.db is None:
            parser.error("--before needs --db")
        compare(args.before, ["status", "--db", str(args.db.absolute())], args.runs)
        return
    with tempfile.TemporaryDirectory() as directory:
        database = args.db
        if database is None:
            database = Path(directory) / "empty.db"
            url = f"sqlite:///{database}"
            subprocess.run(
                [sys.executable, "-m", "watchdog_gpu", "db", "upgrade", "--database-url", url],
                stdout=subprocess.DEVNULL,
                check=True,
            )
        config = Path(directory) / "watchdog-gpu.toml"
        config.write_text(
            f'[watchdog]\ndatabase_url = "sqlite:///{database.absolute()}"\n', encoding="utf-8"
        )
        report("watchdog-gpu --help", ["--help"], args.runs)
        report("watchdog-gpu status --db", ["status", "--db", str(database)], args.runs)
        report("watchdog-gpu status --config", ["status", "--config", str(config)], args.runs)


if __name__ == "__main__":
    main()
