"""The streaming probe's benchmark (``bench_probe.py --stream``; figures in ``bench/README.md``).

Every host is one instance id pointing at the loopback sshd, whose fake ``nvidia-smi dmon``
prints a row per GPU per second, with its date and time (``-o DT``), for as long as the session
lasts (one perl process per host); the production command batches the rows on the "host".
The sshd gives the sessions an empty ``HOME`` (``SshServer(light_home=True)``) so root's login
shell reads no ``~/.bashrc``: on a rented GPU host the login shell runs on the host's own CPU,
here every session shares the watchdog's cores (``--root-home`` keeps root's real rc files).

The run, in phases:

1. **transports**: one kept SSH connection per host (a ``true`` command on each, 8 at a time);
   the process's resident size and threads then, and its CPU over 20 idle seconds, are the
   baseline "SSH transport" cost (what the burst probe's kept connections cost too);
2. **start**: ``Prober.probe_all`` asks for every stream; wait until every host streams;
3. **window** (``--seconds``): a tick (``Prober.probe_all``: take every buffer, condense the rows
   into runs) every ``--tick`` seconds, as the daemon's poll interval would.

Printed: the probe phase of the ticks (p50 / max), threads (ours by name, paramiko's transport
threads, the process), CPU time per wall second over the window (the whole process, and split
between our threads and paramiko's transports), resident memory per host for the transports and
what streaming added on top of them, the Python memory of the stream code per host
(``--trace-memory``: ``tracemalloc`` from before the streams open, measured just before the
last tick when the buffers hold a full tick of rows; tracing slows the process, so the CPU of
that run is not comparable), the coverage (the seconds of the window each GPU was observed, as
the idle clock counts them — up to the last tick minus the batch interval, whose rows are still
on the host — and the rows per GPU-second) and the load average.

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import paramiko

from tests.integration.conftest import FakeGpu
from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import GpuSample, InstanceRef, InstanceSnapshot
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys
from watchdog_gpu.probe.stream_buffer import StreamHealth, StreamRead, StreamState
from watchdog_gpu.probe.stream_command import StreamCommandSpec
from watchdog_gpu.probe.streams import StreamManager, StreamSettings
from watchdog_gpu.rules.idle_clock import gpu_observed_spans

_START_LIMIT_SECONDS = 600.0
_IDLE_SECONDS = 20.0
_EDGE = timedelta(seconds=2)  # a window's first and last seconds: the next row may be due


def stream_text(gpus: int) -> str:
    """One sampling cycle of ``dmon -s u`` for ``gpus`` idle GPUs (header + a row per GPU)."""
    header = [
        "# gpu     sm    mem    enc    dec    jpg    ofa \n",
        "# Idx      %      %      %      %      %      % \n",
    ]
    rows = [f"{gpu:>5}" + "".join(f"{0:>7}" for _ in range(6)) + " \n" for gpu in range(gpus)]
    return "".join(header + rows)


def proc_status(field: str) -> int:
    """A number from /proc/self/status (``VmRSS`` in KiB, ``Threads``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def thread_cpu() -> dict[int, float]:
    """CPU seconds of every thread of this process, by native thread id: the scheduler's exact
    run time (``/proc/…/schedstat``, ns). Not ``stat``'s utime + stime: those are sampled at
    each clock tick, and paramiko's transport threads, waking every 0.1 s in step with the
    100 Hz tick, read there as anything from 0 to twice their real cost."""
    found: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue  # the thread ended
    return found


def is_ours(thread: threading.Thread) -> bool:
    """The streaming probe's own threads (the reader and the connectors) and the ticking
    main thread; paramiko's transport threads are counted apart."""
    return thread.name.startswith("probe-") or thread is threading.main_thread()


class CountingStreams:
    """The manager as the prober sees it, counting the rows every take hands over."""

    def __init__(self, manager: StreamManager) -> None:
        self.manager = manager
        self.rows = 0

    def sync(self, targets: Sequence[SshTarget]) -> None:
        self.manager.sync(targets)

    def take(self, ref: InstanceRef) -> StreamRead | None:
        read = self.manager.take(ref)
        if read is not None:
            self.rows += read.row_count
        return read

    def health(self) -> Mapping[InstanceRef, StreamHealth]:
        return self.manager.health()


@dataclass(frozen=True, slots=True)
class Resident:
    """The process's resident KiB before any connection and with every transport open."""

    start: int
    transports: int


def open_transports(runner: ParamikoRunner, targets: list[SshTarget]) -> int:
    """One kept connection per target (8 logins at a time); returns how many failed."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda target: runner.run(target, "true", 60.0), targets))
    return sum(result.exit_status != 0 for result in results)


def coverage(
    samples: dict[tuple[InstanceRef, int], list[GpuSample]],
    start: datetime,
    end: datetime,
) -> list[float]:
    """Per host and GPU: the fraction of ``[start, end]`` observed, as the idle clock joins the
    streamed runs (a gap of at most 2 s between rows observes the time between them)."""
    fractions: list[float] = []
    low, high = start + _EDGE, end - _EDGE
    for (ref, gpu), own in samples.items():
        spans = gpu_observed_spans(own, low, high, timedelta(0))
        seen = sum((until - since).total_seconds() for since, until in spans)
        fractions.append(seen / (high - low).total_seconds())
        if len(spans) > 1 or fractions[-1] < 0.999:
            holes = ", ".join(
                f"{(following - until).total_seconds():.1f} s at {until:%H:%M:%S}"
                for (_, until), (following, _) in pairwise(spans)
            )
            print(f"{ref.key} GPU {gpu}: {fractions[-1]:.4f} observed; blind: {holes or '-'}")
    return fractions


def run(arguments: argparse.Namespace, server: SshServer, fleet: list[InstanceSnapshot]) -> None:
    """Measure the streaming probe over ``fleet`` (see the module docstring)."""
    fake = FakeGpu(server.state_dir)
    fake.replay("dmon", text=stream_text(arguments.gpus), pace_seconds=1)
    (server.state_dir / "dmon.forever").write_text("0\n")
    (server.state_dir / "dmon.cycle").write_text("1\n")
    clock = SystemClock()
    pins = MemoryHostKeyStore()
    keys = load_private_keys(SshCredentials(private_key_path=server.client.path))
    hosts = len(fleet)
    targets = [
        SshTarget(item.account, item.instance_id, "127.0.0.1", server.port, "root")
        for item in fleet
    ]
    rss_start = proc_status("VmRSS")
    with ParamikoRunner(keys, pins) as runner:
        started = clock.monotonic()
        failed = open_transports(runner, targets)
        rss_transports = proc_status("VmRSS")
        print(
            f"{hosts} transports in {clock.monotonic() - started:.1f} s ({failed} failed): "
            f"{(rss_transports - rss_start) / hosts:.0f} KiB resident per host, "
            f"{proc_status('Threads')} threads",
            flush=True,
        )
        idle_start, wall_start = sum(thread_cpu().values()), clock.monotonic()
        clock.sleep(_IDLE_SECONDS)
        idle = (sum(thread_cpu().values()) - idle_start) / (clock.monotonic() - wall_start)
        print(
            f"the {hosts} idle kept connections (no stream yet) cost {idle * 100:.1f} % of a "
            f"core (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
        if arguments.trace_memory:
            tracemalloc.start()
        settings = StreamSettings(command=StreamCommandSpec(batch_seconds=arguments.batch_seconds))
        with StreamManager(runner, clock=clock, settings=settings) as manager:
            streams = CountingStreams(manager)
            prober = Prober(runner, clock=clock, host_key_store=pins, streams=streams)
            started = clock.monotonic()
            prober.probe_all(fleet, clock.now())  # asks for every stream
            while True:
                states = Counter(health.state for health in manager.health().values())
                if states[StreamState.STREAMING] == hosts:
                    break
                if clock.monotonic() - started > _START_LIMIT_SECONDS:
                    print(f"not all streaming after {_START_LIMIT_SECONDS:g} s: {states}")
                    break
                clock.sleep(0.5)
            print(
                f"{hosts} hosts x {arguments.gpus} GPUs streaming after "
                f"{clock.monotonic() - started:.1f} s",
                flush=True,
            )
            window(arguments, streams, prober, fleet, Resident(rss_start, rss_transports))
    print(f"load average after the run: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def window(
    arguments: argparse.Namespace,
    streams: CountingStreams,
    prober: Prober,
    fleet: list[InstanceSnapshot],
    resident: Resident,
) -> None:
    """The measured window: ticks, then the figures."""
    clock = SystemClock()
    hosts = len(fleet)
    loads = [os.getloadavg()[0]]
    first = clock.now()
    prober.probe_all(fleet, first)  # empty the buffers: the window starts now
    streams.rows = 0
    cpu_start, wall_start = thread_cpu(), clock.monotonic()
    phases: list[float] = []
    samples: dict[tuple[InstanceRef, int], list[GpuSample]] = defaultdict(list)
    traced = 0
    now = first
    ticks = max(1, round(arguments.seconds / arguments.tick))
    for number in range(ticks):
        clock.sleep(max(0.0, wall_start + (number + 1) * arguments.tick - clock.monotonic()))
        if number == ticks - 1 and arguments.trace_memory:
            snapshot = tracemalloc.take_snapshot()
            traced = sum(
                stat.size
                for stat in snapshot.statistics("filename")
                if "watchdog_gpu/probe" in stat.traceback[0].filename
            )
        now = clock.now()
        tick_started = clock.monotonic()
        outcomes = prober.probe_all(fleet, now)
        phases.append(clock.monotonic() - tick_started)
        loads.append(os.getloadavg()[0])
        for outcome in outcomes:
            ref = InstanceRef(outcome.account, outcome.instance_id)
            for sample in outcome.samples:
                samples[(ref, sample.gpu_index)].append(sample)

    wall = clock.monotonic() - wall_start
    cpu_end = thread_cpu()
    threads = threading.enumerate()
    ours_ids = {thread.native_id for thread in threads if is_ours(thread)}
    reader_ids = {thread.native_id for thread in threads if thread.name == "probe-stream"}
    transport_ids = {
        thread.native_id for thread in threads if isinstance(thread, paramiko.Transport)
    }

    def spent(ids: set[int | None] | None) -> float:
        return sum(
            seconds - cpu_start.get(tid, 0.0)
            for tid, seconds in cpu_end.items()
            if ids is None or tid in ids
        )

    rss_streams = proc_status("VmRSS")
    fractions = coverage(samples, first, now - timedelta(seconds=arguments.batch_seconds + 1))
    expected_rows = hosts * arguments.gpus * (now - first).total_seconds()
    phases.sort()
    print(
        f"| {hosts} × {arguments.gpus} "
        f"| {statistics.median(phases):.3f} / {phases[-1]:.3f} s "
        f"| {len(ours_ids)} / {len(transport_ids)} / {proc_status('Threads')} "
        f"| {spent(None) / wall * 100:.1f} ({spent(ours_ids) / wall * 100:.1f} + "
        f"{spent(transport_ids) / wall * 100:.1f}; reader {spent(reader_ids) / wall * 100:.1f}) "
        f"| {(resident.transports - resident.start) / hosts:.0f} "
        f"| {(rss_streams - resident.transports) / hosts:.0f} "
        f"| {traced / 1024 / hosts:.1f} "
        f"| {min(fractions):.4f} / {statistics.fmean(fractions):.4f} "
        f"| {streams.rows / expected_rows:.4f} "
        f"| {min(loads):.1f}–{max(loads):.1f} |",
        flush=True,
    )
    print(
        "(hosts × GPUs | probe phase p50 / max | threads ours / paramiko transports / process "
        "| CPU % of a core (ours + transports; the reader thread alone) "
        "| RSS KiB per host: transport | added by streaming "
        "| stream code KiB per host (tracemalloc) | coverage min / mean | rows per GPU-second "
        f"| load average; tick every {arguments.tick:g} s, {ticks} ticks over "
        f"{wall:.0f} s{', tracemalloc on' if arguments.trace_memory else ''})",
        flush=True,
    )
