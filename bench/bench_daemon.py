"""Benchmark: the real daemon over 1,000 simulated instances, its memory over time and the
database it grows.

Two processes, as a user would run them: ``watchdog-gpu sim serve`` serves the Vast.ai, RunPod
and Lambda APIs of a generated fleet (``bench_cycle.fleet``: 50 accounts × 20 instances × 2 GPUs,
nine in ten training) on 127.0.0.1, and a child process runs the daemon
(:func:`watchdog_gpu.daemon.run_daemon`, the code of ``watchdog-gpu run``: APScheduler jobs, the
supervisor, the metrics endpoint, the SQLite store) against those URLs in monitor mode, polling
and probing every minute. Both run on an accelerated clock (``--speed``: virtual seconds per real
second, the daemon's ``time_scale`` as in ``watchdog-gpu demo``). The probe goes to the
simulator's SSH hosts (``SimulatedSshRunner`` over a replica of the world in the daemon process:
real ``nvidia-smi dmon`` text for the real parser), or with ``--unreachable`` through the real
paramiko runner to ports nothing listens on (1,000 unreachable hosts).

The database is migrated before the daemon starts (``--fresh``: not), so the daemon opens it as
at any restart: at head, without importing Alembic.

Sampled every ``--every`` real seconds: the daemon's resident set (``/proc/PID/status`` VmRSS),
its CPU time, and the database's size (file + WAL). At the end: how many probes ran (the probe
outcomes' repeats), the log lines the daemon wrote, and the database's tables by size.

Run from the repository root::

    .venv/bin/python -m bench.bench_daemon [--hours 2] [--speed 15] [--every 5] [--unreachable]

Not a test: nothing here asserts a speed. The daemon must keep up with ``--speed``: a tick of
1,000 instances takes a few CPU seconds, so one virtual minute must last that long in real time
(``--speed 15``: 4 s); missed or skipped job runs are counted in its log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import tomli_w

from bench.bench_cycle import database_bytes, fleet_data
from watchdog_gpu.clock import SystemClock

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Sample:
    wall: float  # real seconds since the daemon started
    virtual_hours: float
    rss_mib: float
    cpu_seconds: float
    database_mib: float
    load: float  # the machine's one-minute load average


@dataclass
class Run:
    instances: int
    accounts: int
    speed: float
    samples: list[Sample] = field(default_factory=list)
    probes: int = 0
    log_lines: int = 0
    log_kinds: list[tuple[str, int]] = field(default_factory=list)  # the most frequent ones
    tables: list[tuple[str, float]] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--per-account", type=int, default=20)
    parser.add_argument("--hours", type=float, default=2.0, help="virtual hours to run")
    parser.add_argument("--speed", type=float, default=15.0, help="virtual seconds per second")
    parser.add_argument("--every", type=float, default=5.0, help="real seconds between samples")
    parser.add_argument(
        "--warm-up",
        type=float,
        default=1.5,
        help="virtual hours before the steady state (the rules' lookback, 1 h 13 min by "
        "default, fills the store's cache first)",
    )
    parser.add_argument("--unreachable", action="store_true", help="no SSH host answers")
    parser.add_argument(
        "--no-heap-release",
        action="store_true",
        help="the daemon never calls malloc_trim after its jobs (heap_release.py), for an A/B",
    )
    parser.add_argument("--db", type=Path, help="keep the database here (default: a temp dir)")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="let the daemon create the database (it then imports Alembic to migrate it); by "
        "default it is migrated first, as at any restart or after `watchdog-gpu db upgrade`",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    with tempfile.TemporaryDirectory(prefix="bench-daemon-") as scratch:
        database = args.db or Path(scratch) / "watchdog-gpu.db"
        run = measure(args, Path(scratch), database)
    print(report(run, args.hours, unreachable=args.unreachable, warm_up=args.warm_up))
    return 0


def measure(args: argparse.Namespace, scratch: Path, database: Path) -> Run:
    scenario = scratch / "fleet.toml"
    data = fleet_data(args.accounts, args.per_account)
    scenario.write_text(tomli_w.dumps(data), encoding="utf-8")
    run = Run(args.accounts * args.per_account, args.accounts, args.speed)
    if not args.fresh:
        migrate(database)
    python = sys.executable
    server = subprocess.Popen(
        [
            python,
            "-m",
            "watchdog_gpu",
            "sim",
            "serve",
            "--scenario",
            str(scenario),
            "--speed",
            str(args.speed),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # Beside a kept database, the log is kept too.
    log_path = database.with_suffix(".log") if args.db else scratch / "daemon.log"
    try:
        assert server.stdout is not None
        urls = server.stdout.readline().strip()
        json.loads(urls)  # the simulator prints its URLs as one JSON line
        command = [python, "-m", "bench.bench_daemon", "--child", "--scenario", str(scenario)]
        command += ["--urls", urls, "--speed", str(args.speed), "--db", str(database)]
        command += ["--unreachable"] if args.unreachable else []
        command += ["--no-heap-release"] if args.no_heap_release else []
        with log_path.open("w", encoding="utf-8") as log:
            daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                sample_until(run, daemon.pid, database, args)
            finally:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=120)
                except subprocess.TimeoutExpired:  # a probe round still draining: enough
                    daemon.kill()
                    daemon.wait()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    run.log_lines = len(lines)
    run.log_kinds = Counter(_log_kind(line) for line in lines).most_common(5)
    run.probes, run.tables = database_facts(database)
    return run


def _log_kind(line: str) -> str:
    """A log line's message without its time, level, logger and ``key=value`` fields."""
    words: list[str] = []
    for word in line.split(": ", 1)[-1].split():
        if "=" in word:
            break
        words.append(word)
    return " ".join(words)[:60]


def migrate(database: Path) -> None:
    """Bring ``database`` to head in this process, so the daemon starts on a database at head
    (as every restart does) and takes the fast path that never imports Alembic."""
    from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head

    engine = create_engine_for(sqlite_url(database))
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()


def sample_until(run: Run, pid: int, database: Path, args: argparse.Namespace) -> None:
    started = time.monotonic()
    duration = args.hours * 3600 / args.speed
    while True:
        wall = time.monotonic() - started
        rss, cpu = process_facts(pid)
        run.samples.append(
            Sample(
                wall=wall,
                virtual_hours=wall * args.speed / 3600,
                rss_mib=rss,
                cpu_seconds=cpu,
                database_mib=database_bytes(database) / 2**20,
                load=os.getloadavg()[0],
            )
        )
        if wall >= duration:
            return
        SystemClock().sleep(min(args.every, max(0.0, duration - wall)))


def process_facts(pid: int) -> tuple[float, float]:
    """(resident MiB, user + system CPU seconds) of ``pid`` (Linux /proc)."""
    rss = 0.0
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND
    return rss, cpu


def database_facts(path: Path) -> tuple[int, list[tuple[str, float]]]:
    """Probes recorded (the outcome runs' repeats) and the largest tables and indexes, MiB."""
    with sqlite3.connect(path) as connection:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(probe_outcomes)")}
        # Before revision 0003 every probe was a row of its own.
        counted = "coalesce(sum(repeats), 0)" if "repeats" in columns else "count(*)"
        probes = connection.execute(f"SELECT {counted} FROM probe_outcomes")
        total = int(probes.fetchone()[0])
        try:
            rows = connection.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"
            ).fetchall()
        except sqlite3.DatabaseError:  # SQLite built without dbstat
            rows = []
    return total, [(name, size / 2**20) for name, size in rows]


def report(run: Run, hours: float, *, unreachable: bool, warm_up: float = 1.5) -> str:
    samples = run.samples
    steady = [s for s in samples if s.virtual_hours >= min(warm_up, hours / 2)]
    last = samples[-1]
    ticks = run.probes / run.instances if run.instances else 0.0
    growth_per_hour = _slope(steady, "database_mib")
    rss_per_hour = _slope(steady, "rss_mib")
    lines = [
        f"{run.instances} instances in {run.accounts} accounts, "
        f"{'unreachable SSH hosts' if unreachable else 'simulated SSH hosts'}, "
        f"{hours:g} virtual hours at speed {run.speed:g} ({last.wall:.0f} s real):",
        "",
        "| virtual time | daemon RSS | daemon CPU (total) | database (file + WAL) | load |",
        "|---|---|---|---|---|",
    ]
    step = max(1, len(samples) // 8)
    for sample in [*samples[::step][:-1], last]:
        lines.append(
            f"| {timedelta(hours=round(sample.virtual_hours, 2))} | {sample.rss_mib:.0f} MiB "
            f"| {sample.cpu_seconds:.0f} s | {sample.database_mib:.1f} MiB | {sample.load:.1f} |"
        )
    lines += [
        "",
        f"- RSS after {timedelta(seconds=round(steady[0].virtual_hours * 3600))} (warm-up): "
        f"{steady[0].rss_mib:.0f} MiB, then {min(s.rss_mib for s in steady):.0f}–"
        f"{max(s.rss_mib for s in steady):.0f} MiB, at the end {last.rss_mib:.0f} MiB; "
        f"trend {rss_per_hour:+.2f} MiB per virtual hour"
        if steady
        else "- (too short for a steady state)",
        f"- probes recorded: {run.probes} ({ticks:.0f} per instance: "
        f"{ticks / hours if hours else 0:.0f} per virtual hour, 60 when the daemon keeps up)",
        f"- CPU per probed instance-minute: "
        f"{1000 * last.cpu_seconds / run.probes if run.probes else 0:.2f} ms (everything the "
        "daemon does, start-up included)",
        f"- database growth: {growth_per_hour:.1f} MiB per virtual hour, "
        f"≈ {24 * growth_per_hour:.0f} MiB per day",
        f"- daemon log lines: {run.log_lines}"
        + (
            " (" + ", ".join(f"{count}× {kind!r}" for kind, count in run.log_kinds) + ")"
            if run.log_kinds
            else ""
        ),
        f"- load average (1 min) while it ran: {min(s.load for s in samples):.1f}–"
        f"{max(s.load for s in samples):.1f}",
    ]
    if run.tables:
        largest = ", ".join(f"{name} {size:.1f}" for name, size in run.tables)
        lines.append(f"- largest tables and indexes at the end (MiB): {largest}")
    return "\n".join(lines)


def _slope(samples: list[Sample], name: str) -> float:
    """Least-squares slope of ``name`` per virtual hour."""
    if len(samples) < 2:
        return 0.0
    xs = [s.virtual_hours for s in samples]
    ys = [float(getattr(s, name)) for s in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def child(args: argparse.Namespace) -> int:
    """The daemon process: ``watchdog-gpu run``'s code over the simulator's URLs."""
    import paramiko

    from watchdog_gpu.clock import Clock
    from watchdog_gpu.config import (
        AccountConfig,
        AccountSshConfig,
        MetricsSection,
        Settings,
        WatchdogSection,
    )
    from watchdog_gpu.daemon import Daemon, run_daemon
    from watchdog_gpu.heap_release import HeapRelease
    from watchdog_gpu.secrets import SecretReference
    from watchdog_gpu.sim.clock import AcceleratedClock
    from watchdog_gpu.sim.scenario import load_scenario
    from watchdog_gpu.sim.ssh import SimulatedSshRunner
    from watchdog_gpu.sim.world import SimulatedWorld
    from watchdog_gpu.store import sqlite_url
    from watchdog_gpu.wiring import Assembly, assemble

    scenario = load_scenario(args.scenario)
    urls: dict[str, str] = json.loads(args.urls)
    clock = AcceleratedClock(args.speed)
    watchdog = WatchdogSection.model_validate(
        {
            "mode": "monitor",
            "poll_interval": scenario.tick,
            "probe_interval": scenario.tick,
            "database_url": sqlite_url(args.db),
        }
    )
    # A throw-away key: unreachable hosts are only tried by a prober that has a key.
    key_file = args.db.with_name(args.db.name + ".bench-key")
    paramiko.RSAKey.generate(2048).write_private_key_file(str(key_file))
    settings = Settings(
        watchdog=watchdog,
        accounts=[
            AccountConfig(
                name=account.name,
                provider=account.provider,
                api_key=SecretReference.plain(account.effective_api_key),
                api_url=urls[account.provider],
                ssh=AccountSshConfig(key_file=key_file),
            )
            for account in scenario.accounts
        ],
        metrics=MetricsSection(listen_address="127.0.0.1", port=0),
    )

    def build(settings: Settings, clock: Clock, environ: Mapping[str, str]) -> Assembly:
        # As the daemon's own build (wiring.assemble_daemon): migrations in a child process.
        if args.unreachable:
            return assemble(settings, clock, environ, migrate_in_child=True)
        world = SimulatedWorld(scenario, clock, origin=clock.now())
        return assemble(
            settings, clock, environ, runner=SimulatedSshRunner(world), migrate_in_child=True
        )

    def started(daemon: Daemon) -> None:
        if args.no_heap_release:
            daemon.heap_release = HeapRelease(time.monotonic, trim=None)

    return run_daemon(
        settings,
        clock,
        dict(os.environ),
        build=build,
        time_scale=args.speed,
        wall_clock=SystemClock(),
        on_started=started,
    )


if __name__ == "__main__":
    sys.exit(main())
