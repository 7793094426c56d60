"""Benchmark: full engine cycles (poll → probe → evaluate → act → deliver) over a large fleet.

The fleet is built in code: 50 accounts (Vast.ai, RunPod and Lambda in turn) × 20 instances =
1,000 instances of 2 GPUs each, plus one volume and one SSH key per account. Nine instances in
ten train at 90 %; the rest are idle from the start (they stay inside the idle window for the
few cycles measured, so nothing is destroyed). The engine is the production one, as ``simulate``
builds it: provider adapters over the in-process transports of the simulator's dialect handlers,
the SSH prober with the fake runner (real ``nvidia-smi dmon`` text, real parser), a SQLite file.

Before the first cycle the database gets the history a daemon in its stride has: one condensed
probe (one sample per GPU) per instance per minute over the engine's lookback (73 minutes with
the default rules), i.e. about 146,000 samples and 73,000 probe outcomes in the window the fleet
view reads. The first cycle then also records every instance for the first time.

Measures, per cycle: wall and CPU time, the wall time of each phase and of the store calls
inside them (``record_observation``, ``record_probes``, ``load_fleet_view``), the bytes the
process wrote (``/proc/self/io`` ``wchar``: WAL frames and checkpoints) against the database's
growth, the first (cold) cycle apart from the median of the following ones, and the process's
peak RSS.

Run from the repository root::

    .venv/bin/python -m bench.bench_cycle [--accounts 50] [--per-account 20] [--cycles 4]
        [--no-history] [--write-readme]

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_simulate import machine, write_readme_block
from watchdog_gpu.gc_freeze import long_lived_frozen
from watchdog_gpu.model import GpuSample, ProbeOutcome, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.probe.stream_buffer import HostBuffer
from watchdog_gpu.probe.stream_reader import StreamReader
from watchdog_gpu.sim.scenario import Scenario, parse_scenario
from watchdog_gpu.sim.simulate import InProcessTransport, Simulation, simulation
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.sim.ssh_stream import SimulatedStreams
from watchdog_gpu.store import create_engine_for, sqlite_url
from watchdog_gpu.store.migrate_process import upgrade_in_child_process

PROVIDERS = ("vast", "runpod", "lambda")
START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
PHASES = ("poll_all", "probe", "evaluate", "act", "deliver")
STORE_CALLS = ("record_observation", "record_probes", "load_fleet_view")


def fleet(accounts: int, per_account: int, gpus: int = 2, *, bursty: bool = False) -> Scenario:
    """The benchmark's scenario: ``accounts`` × ``per_account`` instances."""
    return parse_scenario(fleet_data(accounts, per_account, gpus, bursty=bursty))


# An inference server: a request every 7 s keeps its GPUs busy for 1 s (never in step with
# the minute): a run a second or two, the most samples a GPU can make (docs/probe.md).
BURSTY = {"period": "7s", "busy_for": "1s", "util": 60}


def fleet_data(
    accounts: int, per_account: int, gpus: int = 2, *, bursty: bool = False
) -> dict[str, Any]:
    """The scenario of :func:`fleet` as the TOML table it would be read from; ``bursty``: one
    instance in ten (of the busy ones) serves inference in bursts (:data:`BURSTY`)."""
    data: dict[str, Any] = {
        "name": f"cycle-{accounts}x{per_account}",
        "start": START,
        "duration": "24h",
        "tick": "60s",
        "accounts": [],
    }
    for number in range(accounts):
        provider = PROVIDERS[number % len(PROVIDERS)]
        account: dict[str, Any] = {
            "name": f"{provider}-{number:02d}",
            "provider": provider,
            "instances": [
                {
                    # Numeric ids: Vast.ai's are integers.
                    "id": str(100_000 + number * 1000 + index),
                    "name": f"job-{number}-{index}",
                    "gpu_count": gpus,
                    "compute_usd_per_hour": 0.5,
                    "events": [_start(index, bursty=bursty)],
                    # Lambda bills no per-instance storage.
                    **(
                        {}
                        if provider == "lambda"
                        else {"disk_gb": 50.0, "storage_usd_per_gb_month": 0.2}
                    ),
                }
                for index in range(per_account)
            ],
            "ssh_keys": [{"public_key": f"ssh-ed25519 AAAAbench{number:02d} bench"}],
        }
        account["volumes"] = [
            {"id": str(500 + number), "size_gb": 100.0, "storage_usd_per_gb_month": 0.1}
        ]
        if provider != "lambda":
            account["balance_usd"] = 10_000.0
        data["accounts"].append(account)
    return data


def _start(index: int, *, bursty: bool) -> dict[str, Any]:
    if bursty and index % 10 == 5:
        return {"at": "0s", "state": "running", "gpu_pattern": BURSTY}
    return {"at": "0s", "state": "running", "gpu_util": _util(index)}


def _util(index: int) -> int:
    """Nine instances in ten train at 90 %; every tenth is idle."""
    return 0 if index % 10 == 9 else 90


def backfill(sim: Simulation, minutes: int) -> int:
    """Record ``minutes`` of per-minute probes (one sample per GPU) for every instance before
    the scenario starts; returns how many samples were written."""
    written = 0
    for offset in range(minutes, 0, -1):
        at = START - timedelta(minutes=offset)
        outcomes = []
        for account in sim.scenario.accounts:
            for instance in account.instances:
                util = float(_util(int(instance.id) % 1000))
                samples = tuple(
                    GpuSample(
                        account=account.name,
                        instance_id=instance.id,
                        at=at,
                        gpu_index=gpu,
                        verdict=Verdict.IDLE if util == 0 else Verdict.BUSY,
                        source=SampleSource.DMON,
                        sm=util,
                        mem=util / 2,
                        # What the simulated GPUs' dmon lines say, as the streams record it
                        # in the measured cycles (sim/dmon_render.py): no video, no media.
                        enc=0.0,
                        dec=0.0,
                        jpg=0.0,
                        ofa=0.0,
                    )
                    for gpu in range(instance.gpu_count)
                )
                outcomes.append(
                    ProbeOutcome(
                        account=account.name,
                        instance_id=instance.id,
                        at=at,
                        status=ProbeStatus.OK,
                        duration_seconds=1.0,
                        samples=samples,
                    )
                )
                written += len(samples)
        sim.store.record_probes(outcomes)
    return written


def migrated_as_the_daemon_does(directory: Path) -> Path:
    """An empty database file at head, migrated in a child process like the daemon's
    (``wiring.assemble_daemon``): Alembic never loads into this process, as into the daemon's,
    and the peak RSS measured here is not inflated by it (≈ 14 MiB)."""
    database = directory / "bench.db"
    url = sqlite_url(database)
    engine = create_engine_for(url)
    upgrade_in_child_process(engine, url)
    engine.dispose()
    return database


Timings = dict[str, list[float]]

# Where the simulator takes over inside a cycle, and where it hands back to the daemon's code
# (the simulated SSH streams feed the daemon's real stream reader and buffer).
SIMULATOR_ENTRIES: tuple[tuple[type, str], ...] = (
    (InProcessTransport, "handle_request"),
    (SimulatedStreams, "sync"),
    (SimulatedStreams, "take"),
    (SimulatedStreams, "health"),
    (SimulatedSshRunner, "run"),
)
DAEMON_REENTRIES: tuple[tuple[type, str], ...] = (
    (StreamReader, "feed_stdout"),
    (StreamReader, "feed_stderr"),
    (HostBuffer, "take"),
)


class CpuSplit:
    """The CPU time of the simulator's code inside a cycle, measured directly (no profiler):
    each simulator entry point's CPU time minus the daemon's code it calls back; the rest of a
    cycle is the daemon's own. ``thread_time`` (the cycle runs in one thread; reading the
    process's CPU clock costs ≈ 3.5 µs here, the thread's ≈ 0.5 µs): the daemon's share also
    holds about one clock read per call-back (60 a host a minute: ≈ 30 ms a cycle at 1k)."""

    def __init__(self) -> None:
        self.simulator = 0.0
        self._nested: list[float] = []  # per open wrapper: time of the calls nested in it
        self._patched: list[tuple[type, str, Any]] = []

    def __enter__(self) -> CpuSplit:
        for owner, name in SIMULATOR_ENTRIES:
            self._patch(owner, name, simulator=True)
        for owner, name in DAEMON_REENTRIES:
            self._patch(owner, name, simulator=False)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)

    def _patch(self, owner: type, name: str, *, simulator: bool) -> None:
        original = owner.__dict__[name]
        self._patched.append((owner, name, original))
        nested = self._nested

        clock = time.thread_time

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            nested.append(0.0)
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = clock() - started
                inner = nested.pop()
                if nested:
                    nested[-1] += elapsed  # the caller's time, not its own
                if simulator:
                    self.simulator += elapsed - inner

        setattr(owner, name, wrapper)


def timed(
    name: str,
    function: Callable[..., Any],
    timings: Timings,
    split: list[CpuSplit] | None = None,
) -> Callable[..., Any]:
    """``function`` timed into ``timings[name]``; with ``split`` (holding the cycle's CpuSplit)
    also its own CPU without the simulator's code into ``timings[name + OWN]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        cpu = time.thread_time()
        simulated = split[0].simulator if split else 0.0
        try:
            return function(*args, **kwargs)
        finally:
            timings[name].append(time.perf_counter() - started)
            if split:
                inner = split[0].simulator - simulated
                timings[name + OWN].append(time.thread_time() - cpu - inner)

    return wrapper


OWN = ", the daemon's own CPU"


def instrument(sim: Simulation, timings: Timings, split: list[CpuSplit] | None = None) -> None:
    """Time the engine's phases (with ``split``: and their own CPU, see :func:`timed`) and the
    store's heavy calls (instance attributes shadow the methods, so ``Watchdog.tick`` calls
    the wrappers)."""
    watchdog = sim.assembly.watchdog
    for name in PHASES:
        setattr(watchdog, name, timed(name, getattr(watchdog, name), timings, split))
    for name in STORE_CALLS:
        setattr(sim.store, name, timed(name, getattr(sim.store, name), timings))


def run(
    accounts: int,
    per_account: int,
    cycles: int,
    history: bool,
    *,
    split: bool = True,
    profile_to: Path | None = None,
    bursty: bool = False,
) -> tuple[str, float]:
    scenario = fleet(accounts, per_account, bursty=bursty)
    timings: Timings = defaultdict(list)
    walls: list[float] = []
    cpus: list[float] = []
    written: list[float] = []
    grown: list[float] = []
    own: list[float] = []
    # The engine built, then the start-up objects frozen as the daemon and `simulate` do
    # (gc_freeze.py) before the history a running daemon finds in its database.
    with (
        tempfile.TemporaryDirectory(prefix="bench-cycle-") as scratch,
        simulation(scenario, database=migrated_as_the_daemon_does(Path(scratch))) as sim,
        long_lived_frozen(),
        sim.collecting(),  # between the cycles, as the daemon between its jobs
    ):
        minutes = int(sim.assembly.watchdog.settings.lookback.total_seconds() // 60)
        samples = backfill(sim, minutes) if history else 0
        current: list[CpuSplit] = []
        instrument(sim, timings, current)
        for _ in range(cycles):
            size, wrote = database_bytes(sim.database), bytes_written()
            with CpuSplit() as split_cpu:
                current[:] = [split_cpu]
                started, cpu = time.perf_counter(), time.process_time()
                sim.step()
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu)
            own.append(cpus[-1] - split_cpu.simulator)
            written.append(bytes_written() - wrote)
            grown.append(database_bytes(sim.database) - size)
        current.clear()  # the profiled cycle below has no split
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        shares = simulator_share(sim, profile_to) if split else None
    instances = accounts * per_account
    lines = [
        f"{instances} instances in {accounts} accounts"
        + (", one in ten serving inference in bursts" if bursty else "")
        + f", {samples} samples of history "
        f"({minutes} min lookback), {cycles} cycles:",
        "",
        "| part | first cycle | later cycles (median) |",
        "|---|---|---|",
        _row("whole cycle", walls),
        _row("whole cycle, CPU", cpus),
    ]
    lines += [_row(name, timings[name]) for name in PHASES]
    lines += [_row(name + OWN, timings[name + OWN]) for name in PHASES]
    lines += [_row(f"store: {name}", _per_cycle(timings[name], cycles)) for name in STORE_CALLS]
    lines += [_size_row("bytes written (write calls: WAL, checkpoints)", written)]
    lines += [_size_row("database growth (file + WAL)", grown)]
    lines += ["", f"Peak RSS: {rss:.0f} MiB (before the profiled cycle)."]
    steady = statistics.median(cpus[1:]) if len(cpus) > 1 else cpus[0]
    daemon = statistics.median(own[1:]) if len(own) > 1 else own[0]
    lines += [
        f"Steady cycle CPU: {steady * 1000:.0f} ms, {steady * 1e6 / instances:.0f} µs per instance"
        f"; first (cold) cycle {cpus[0] / steady:.2f}× a steady one.",
        f"The daemon's own CPU in a steady cycle (the cycle's minus the simulator's code, timed "
        f"at its entry points): {daemon * 1000:.0f} ms, {daemon * 1e6 / instances:.0f} µs per "
        "instance"
        + (
            f" (later cycles {min(own[1:]) * 1000:.0f}–{max(own[1:]) * 1000:.0f} ms; the first "
            f"of them {own[1] * 1000:.0f} ms: the streams' first full minute of rows)."
            if len(own) > 2
            else "."
        ),
    ]
    if shares is not None:
        simulated = shares["simulator"] / sum(shares.values())
        lines += [
            f"One more cycle under cProfile: {simulated:.0%} of its CPU is the simulator's "
            "(`watchdog_gpu/sim`: the providers' HTTP handlers, rendering dmon text, the "
            "simulated SSH streams) and the benchmark's; the daemon's own share of the steady "
            f"cycle is ≈ {steady * (1 - simulated) * 1000:.0f} ms, "
            f"{steady * (1 - simulated) * 1e6 / instances:.0f} µs per instance. By part "
            "(seconds under the profiler): "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(shares.items()))
            + "."
        ]
    return "\n".join(lines), rss


SHARES = (
    ("simulator", ("/watchdog_gpu/sim/", "/bench/")),
    ("daemon: probe", ("/watchdog_gpu/probe/",)),
    ("daemon: store", ("/watchdog_gpu/store/", "/sqlalchemy/", "sqlite3")),
    ("daemon: providers and HTTP", ("/watchdog_gpu/providers/", "/httpx/", "/httpcore/")),
)


def simulator_share(sim: Simulation, profile_to: Path | None = None) -> dict[str, float]:
    """Profile one more cycle and split its CPU time by where it was spent: the simulator's
    code (and the benchmark's) against the daemon's, by file. A builtin's time goes to the
    part that called it. The profiler slows Python calls more than C code, so these are
    shares, not times. ``profile_to``: also save the profile there (``pstats`` format)."""
    profile = cProfile.Profile()
    profile.enable()
    sim.step()
    profile.disable()
    if profile_to is not None:
        profile.dump_stats(profile_to)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, own, _cum, callers) in stats.items():
        if filename == "~" and callers:  # a builtin: charged to its callers
            for (caller_file, _l, _n), (_c, _n2, caller_own, _cu) in callers.items():
                shares[_share_of(caller_file)] += caller_own
        else:
            shares[_share_of(filename)] += own
    return dict(shares)


def _share_of(filename: str) -> str:
    for name, parts in SHARES:
        if any(part in filename for part in parts):
            return name
    return "daemon: the rest (engine, rules, plan, Python)"


def _per_cycle(values: list[float], cycles: int) -> list[float]:
    """Per-account calls (record_observation) summed into one figure per cycle."""
    if len(values) <= cycles:
        return values
    size = len(values) // cycles
    return [sum(values[index * size : (index + 1) * size]) for index in range(cycles)]


def bytes_written() -> int:
    """Bytes this process handed to write() so far (Linux ``/proc/self/io`` ``wchar``; 0
    elsewhere): the WAL frames, checkpoints and anything else written."""
    try:
        with open("/proc/self/io", encoding="ascii") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def database_bytes(path: Path) -> int:
    """The SQLite file and its WAL."""
    return sum(
        candidate.stat().st_size
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )


def _size_row(name: str, values: list[float]) -> str:
    later = f"{statistics.median(values[1:]) / 2**20:.2f} MiB" if len(values) > 1 else "–"
    return f"| {name} | {values[0] / 2**20:.2f} MiB | {later} |"


def _row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | – | – |"
    later = f"{1000 * statistics.median(values[1:]):.0f} ms" if len(values) > 1 else "–"
    return f"| {name} | {1000 * values[0]:.0f} ms | {later} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--per-account", type=int, default=20)
    parser.add_argument(
        "--cycles",
        type=int,
        default=10,
        help="cycles to run (default 10: the median of 9 later cycles; single cycles of one "
        "run spread by ±10 %%)",
    )
    parser.add_argument("--no-history", action="store_true", help="start from an empty database")
    parser.add_argument(
        "--no-split", action="store_true", help="skip the profiled cycle (simulator's share)"
    )
    parser.add_argument(
        "--profile", type=Path, metavar="FILE", help="save the profiled cycle's pstats to FILE"
    )
    parser.add_argument(
        "--bursty",
        action="store_true",
        help="one instance in ten serves inference in bursts (busy 1 s in 7)",
    )
    parser.add_argument("--write-readme", action="store_true", help="update bench/README.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    load = os.getloadavg()
    report, _ = run(
        args.accounts,
        args.per_account,
        max(args.cycles, 1),
        not args.no_history,
        split=not args.no_split,
        profile_to=args.profile,
        bursty=args.bursty,
    )
    load_text = "load average " + " / ".join(f"{value:.1f}" for value in load)
    report += f"\n\nMachine load when it started: {load_text} (1/5/15 min, 2 cores)."
    print(report)
    if args.write_readme:
        stamp = datetime.now(UTC).date().isoformat()  # noqa: TID251 - a benchmark reads real time
        given = sys.argv[1:] if argv is None else argv
        command = " ".join(
            ["`.venv/bin/python -m bench.bench_cycle", *(a for a in given if a != "--write-readme")]
        )
        write_readme_block("bench_cycle", f"Measured {stamp} on {machine()} ({command}`). {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
