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

``--stream`` measures the streaming probe instead (``docs/probe.md``; ``bench/probe_stream.py``
says what and how): every host runs one long-lived fake ``dmon`` printing a row per GPU per
second (two GPUs by default); one :class:`~watchdog_gpu.probe.streams.StreamManager` serves
them all.

Run as root (sshd needs it), from the repository root::

    .venv/bin/python -m bench.bench_probe [--instances 50] [--rounds 3] [--workers 8] [--paced]
    .venv/bin/python -m bench.bench_probe --stream [--instances 200] [--gpus 2] [--seconds 60]
        [--tick 15] [--trace-memory] [--root-home]

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from bench import probe_stream
from tests.integration.conftest import FakeGpu
from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import InstanceSnapshot, InstanceState, ProbeOutcome, ProbeStatus
from watchdog_gpu.probe.command import ProbeCommandSpec
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import DEFAULT_WORKERS, Prober
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys
from watchdog_gpu.probe.stream_command import StreamCommandSpec

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


@contextmanager
def bench_sshd(*, light_home: bool = False) -> Iterator[SshServer]:
    """A private sshd on 127.0.0.1 in a scratch directory, stopped afterwards (``light_home``:
    sessions without root's rc files, see ``bench/probe_stream.py``)."""
    with tempfile.TemporaryDirectory(prefix="bench-sshd-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o700)
        server = SshServer(SSHD, workdir, light_home=light_home)
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
    parser.add_argument(
        "--batch-seconds",
        type=int,
        default=StreamCommandSpec().batch_seconds,
        help="seconds of rows the host sends at once (--stream; 1: about a packet a second)",
    )
    parser.add_argument(
        "--trace-memory", action="store_true", help="tracemalloc the stream code (--stream)"
    )
    parser.add_argument(
        "--root-home", action="store_true", help="sessions run root's rc files (--stream)"
    )
    arguments = parser.parse_args()
    with bench_sshd(light_home=arguments.stream and not arguments.root_home) as server:
        if arguments.stream:
            probe_stream.run(arguments, server, instances(server, arguments.instances))
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
