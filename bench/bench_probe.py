"""Benchmark: probe rounds over 50 instances behind a real sshd on 127.0.0.1.

Every instance has its own instance id (so its own host-key pin and kept connection) and points at
the same loopback sshd, whose fake ``nvidia-smi`` replays a real idle H100 capture (its five rows
repeated to the default ten samples). Measures:

- the wall time of a full round with the default pool (8 workers): the first round connects,
  negotiates and authenticates 50 times; later rounds reuse the kept connections;
- the per-probe duration (p50 / p95 / max of ``ProbeOutcome.duration_seconds``);
- peak memory: ``tracemalloc`` peak of Python allocations during a connect round plus a reuse
  round (measured in a separate pass, since tracing slows everything down), and the process's
  ``ru_maxrss``.

``--paced`` makes the fake print one dmon row per second as the real tool does with the default
``-d 1 -c 10``, so a round takes as long as in production (sampling dominates); without it the
fake answers at once and the figures are the probe's own overhead.

``--stream`` measures the streaming probe instead (``docs/probe.md``): every host runs one
long-lived fake ``dmon`` printing a row per GPU per second (two GPUs by default); one
:class:`~watchdog_gpu.probe.streams.StreamManager` serves them all. Measured over ``--seconds``:
the probe phase of a tick (``Prober.probe_all``: take every buffer, condense the rows) every
``--tick`` seconds, the threads (ours and paramiko's), the process's CPU time per wall second,
the resident memory per host, the Python memory of the stream code per host (``tracemalloc``
of ``watchdog_gpu/probe/``, i.e. beyond paramiko's SSH transport), and the coverage (the
fraction of each GPU's seconds with a row).

Run as root (sshd needs it), from the repository root::

    .venv/bin/python -m bench.bench_probe [--instances 50] [--rounds 3] [--workers 8] [--paced]
    .venv/bin/python -m bench.bench_probe --stream [--instances 200] [--gpus 2] [--seconds 60]

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from tests.integration.conftest import FakeGpu
from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import InstanceSnapshot, InstanceState, ProbeOutcome, ProbeStatus
from watchdog_gpu.probe.command import ProbeCommandSpec
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import DEFAULT_WORKERS, Prober
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys
from watchdog_gpu.probe.stream_buffer import StreamState
from watchdog_gpu.probe.streams import StreamManager, StreamSettings

SSHD = "/usr/sbin/sshd"
IDLE_DMON = "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt"
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def dmon_text(samples: int) -> str:
    """The idle H100 capture (5 rows) with its rows repeated to ``samples`` rows, as the default
    ``dmon -c 10`` would print."""
    lines = (FIXTURES / IDLE_DMON).read_text().splitlines(keepends=True)
    header = [line for line in lines if line.startswith("#")]
    rows = [line for line in lines if not line.startswith("#")]
    return "".join(header + [rows[number % len(rows)] for number in range(samples)])


def instances(server: SshServer, count: int) -> list[InstanceSnapshot]:
    now = datetime.now(UTC)  # noqa: TID251 - a benchmark reads real time
    return [
        InstanceSnapshot(
            provider="vast",
            account="bench",
            instance_id=f"bench-{number:03d}",
            name=f"job {number}",
            state=InstanceState.RUNNING,
            raw_state="running",
            observed_at=now,
            ssh_host="127.0.0.1",
            ssh_port=server.port,
            gpu_count=1,
        )
        for number in range(count)
    ]


def make_prober(server: SshServer, workers: int) -> tuple[ParamikoRunner, Prober]:
    pins = MemoryHostKeyStore()
    keys = load_private_keys(SshCredentials(private_key_path=server.client.path))
    runner = ParamikoRunner(keys, pins)
    return runner, Prober(
        runner, clock=SystemClock(), host_key_store=pins, spec=ProbeCommandSpec(), workers=workers
    )


def timed_round(prober: Prober, fleet: list[InstanceSnapshot]) -> tuple[float, list[ProbeOutcome]]:
    clock = SystemClock()
    started = clock.monotonic()
    outcomes = prober.probe_all(fleet, clock.now())
    return clock.monotonic() - started, outcomes


def describe(label: str, seconds: float, outcomes: list[ProbeOutcome]) -> str:
    durations = sorted(outcome.duration_seconds for outcome in outcomes)
    ok = sum(outcome.status is ProbeStatus.OK for outcome in outcomes)
    p95 = durations[max(0, round(0.95 * len(durations)) - 1)]
    return (
        f"| {label} | {seconds:.2f} | {statistics.median(durations) * 1000:.0f} "
        f"| {p95 * 1000:.0f} | {durations[-1] * 1000:.0f} | {ok}/{len(outcomes)} |"
    )


def proc_status(field: str) -> int:
    """A number from /proc/self/status (``VmRSS`` in KiB, ``Threads``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stream_text(gpus: int) -> str:
    header = [
        "# gpu     sm    mem    enc    dec    jpg    ofa \n",
        "# Idx      %      %      %      %      %      % \n",
    ]  # `dmon -s u`, as the streaming command runs it
    rows = [f"{gpu:>5}" + "".join(f"{0:>7}" for _ in range(6)) + " \n" for gpu in range(gpus)]
    return "".join(header + rows)


def stream_bench(arguments: argparse.Namespace, server: SshServer) -> None:
    fake = FakeGpu(server.state_dir)
    fake.replay("dmon", text=stream_text(arguments.gpus), pace_seconds=1)
    (server.state_dir / "dmon.forever").write_text("0\n")
    (server.state_dir / "dmon.cycle").write_text("1\n")
    fleet = instances(server, arguments.instances)
    clock = SystemClock()
    pins = MemoryHostKeyStore()
    keys = load_private_keys(SshCredentials(private_key_path=server.client.path))
    rss_before = proc_status("VmRSS")
    threads_before = proc_status("Threads")
    with ParamikoRunner(keys, pins) as runner, StreamManager(runner, clock=clock) as manager:
        prober = Prober(runner, clock=clock, host_key_store=pins, streams=manager)
        started = clock.monotonic()
        prober.probe_all(fleet, clock.now())  # starts every stream
        while True:
            states = [health.state for health in manager.health().values()]
            if all(state is StreamState.STREAMING for state in states):
                break
            if clock.monotonic() - started > 300:
                print(f"not all streaming after 300 s: {Counter(states)}", flush=True)
                break
            clock.sleep(0.5)
        print(
            f"{arguments.instances} hosts x {arguments.gpus} GPUs streaming after "
            f"{clock.monotonic() - started:.1f} s (connect + login + session, "
            f"{manager.threads()} manager threads)",
            flush=True,
        )
        prober.probe_all(fleet, clock.now())  # empty the buffers: the window starts now
        tracemalloc.start()
        cpu_start, wall_start = cpu_seconds(), clock.monotonic()
        phases: list[float] = []
        coverage: list[float] = []
        last = clock.now()
        while clock.monotonic() - wall_start < arguments.seconds:
            clock.sleep(arguments.tick)
            now = clock.now()
            tick_started = clock.monotonic()
            outcomes = prober.probe_all(fleet, now)
            phases.append(clock.monotonic() - tick_started)
            window = (now - last).total_seconds()
            for outcome in outcomes:
                for gpu in range(arguments.gpus):
                    seen = sum(
                        (s.at - s.covers_from).total_seconds() + 1
                        for s in outcome.samples
                        if s.gpu_index == gpu and s.covers_from is not None
                    )
                    coverage.append(min(1.0, seen / window))
            last = now
        cpu = (cpu_seconds() - cpu_start) / (clock.monotonic() - wall_start)
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        ours = sum(
            stat.size
            for stat in snapshot.statistics("filename")
            if "watchdog_gpu/probe" in stat.traceback[0].filename
        )
        rss_after = proc_status("VmRSS")
        threads = proc_status("Threads")
    phases.sort()
    print(
        "| hosts | GPUs | probe phase p50 / max s | threads ours / total | CPU % of a core "
        "| RSS KiB per host | stream code KiB per host | coverage min / mean |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {arguments.instances} | {arguments.gpus} "
        f"| {statistics.median(phases):.3f} / {phases[-1]:.3f} "
        f"| {1 + StreamSettings().connectors} / {threads - threads_before + 1} "
        f"| {cpu * 100:.1f} "
        f"| {(rss_after - rss_before) / arguments.instances:.0f} "
        f"| {ours / 1024 / arguments.instances:.1f} "
        f"| {min(coverage):.3f} / {statistics.fmean(coverage):.4f} |",
        flush=True,
    )
    print(
        f"(tick every {arguments.tick:g} s over {arguments.seconds:g} s; tracemalloc on "
        f"during the window; CPU includes the ticks)",
        flush=True,
    )


@contextmanager
def bench_sshd() -> Iterator[SshServer]:
    """A private sshd on 127.0.0.1 in a scratch directory, stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-sshd-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o700)
        server = SshServer(SSHD, workdir)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--paced", action="store_true", help="one dmon row per second")
    parser.add_argument("--stream", action="store_true", help="measure the streaming probe")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per host (--stream)")
    parser.add_argument("--seconds", type=float, default=60, help="window (--stream)")
    parser.add_argument("--tick", type=float, default=15, help="seconds between ticks (--stream)")
    arguments = parser.parse_args()
    with bench_sshd() as server:
        if arguments.stream:
            stream_bench(arguments, server)
            return
        fake = FakeGpu(server.state_dir)
        fake.replay(
            "dmon",
            text=dmon_text(ProbeCommandSpec().samples),
            pace_seconds=1 if arguments.paced else None,
        )
        fleet = instances(server, arguments.instances)

        print(
            f"{arguments.instances} instances, {arguments.workers} workers, "
            f"{'paced (1 row/s)' if arguments.paced else 'instant'} fake nvidia-smi"
        )
        print("| round | wall s | p50 ms | p95 ms | max ms | ok |", flush=True)
        print("|---|---|---|---|---|---|", flush=True)
        runner, prober = make_prober(server, arguments.workers)
        with runner:
            for number in range(1, arguments.rounds + 1):
                seconds, outcomes = timed_round(prober, fleet)
                label = "1 (connect)" if number == 1 else f"{number} (reuse)"
                print(describe(label, seconds, outcomes), flush=True)
            kept = runner.kept_connections()
        logins = server.log_path.read_text().count("Accepted publickey")
        print(f"kept connections after the rounds: {kept}; sshd logins: {logins}", flush=True)

        runner, prober = make_prober(server, arguments.workers)
        tracemalloc.start()
        with runner:
            timed_round(prober, fleet)
            timed_round(prober, fleet)
            _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"tracemalloc peak (connect + reuse round): {peak / 2**20:.1f} MiB", flush=True)
        print(f"ru_maxrss of the process: {maxrss_kib / 1024:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
