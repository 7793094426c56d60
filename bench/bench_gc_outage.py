"""Benchmark (an adversary): does garbage pile up while SSH hosts keep failing?

Every failed SSH connection that got past the TCP connect leaves paramiko's own reference
cycle (a ``Transport`` refers to itself: ≈ 57 objects), freed only by the cyclic collector. The
daemon runs that collector between its jobs and freezes what survives (``gc_freeze.py``
``CollectBetweenJobs``): a ``Transport`` alive at a pass (mid-handshake) is frozen with it, and
its garbage then waits for the next full pass. This run makes that as bad as it gets: ``--hosts``
streamed hosts whose port accepts and hangs up at once (no SSH banner), each retried every
second (``max_backoff`` 1 s instead of 60 s), for ``--seconds``, while a "job" ends every
``--job`` seconds; the collector's pacing is scaled down with it (``--min-interval``,
``--full-every``). ``--cpython`` runs CPython's own collector instead, for the comparison.

Printed every ``--every`` seconds: the process's resident set (``VmRSS``), the objects the
collector tracks (``len(gc.get_objects())``) and the frozen ones, and the failed sessions so far.

Run from the repository root::

    .venv/bin/python -m bench.bench_gc_outage [--hosts 200] [--seconds 180] [--cpython]

Loopback only. Not a test: nothing here asserts a size.
"""

from __future__ import annotations

import argparse
import gc
import io
import logging
import socket
import sys
import threading
import time
from contextlib import ExitStack
from datetime import timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from watchdog_gpu.clock import SystemClock
from watchdog_gpu.gc_freeze import CollectBetweenJobs, long_lived_frozen
from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.paramiko_lean import paramiko
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.ssh import ParamikoRunner, SshTimeouts
from watchdog_gpu.probe.streams import StreamManager, StreamSettings


class HangUp:
    """A loopback port that accepts every connection and closes it at once (no banner)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._loop, name="hang-up", daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()


def _key() -> paramiko.PKey:
    text = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )
    return paramiko.Ed25519Key(file_obj=io.StringIO(text))


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--job", type=float, default=2.0, help="seconds between two job ends")
    parser.add_argument("--min-interval", type=float, default=5.0)
    parser.add_argument("--full-every", type=float, default=60.0)
    parser.add_argument("--cpython", action="store_true", help="CPython's collector only")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # a warning per failed session is not the point here

    hang_up = HangUp()
    clock = SystemClock()
    now = clock.now()
    hosts = [
        InstanceSnapshot(
            provider="vast",
            account="outage",
            instance_id=f"i-{index}",
            name=f"host {index}",
            state=InstanceState.RUNNING,
            raw_state="running",
            observed_at=now,
            ssh_host="127.0.0.1",
            ssh_port=hang_up.port,
            ssh_user="root",
            gpu_count=1,
        )
        for index in range(args.hosts)
    ]
    runner = ParamikoRunner(
        [_key()],
        MemoryHostKeyStore(),
        timeouts=SshTimeouts(connect_seconds=2, banner_seconds=2, handshake_seconds=2),
    )
    collector = CollectBetweenJobs(
        time.monotonic, min_interval=args.min_interval, full_every=args.full_every
    )
    settings = StreamSettings(max_backoff=timedelta(seconds=1), fallback_after=10**9)
    print(
        f"{args.hosts} hosts hanging up, {args.seconds:g} s, a job every {args.job:g} s; "
        + (
            "CPython's collector"
            if args.cpython
            else f"collected between jobs (every {args.min_interval:g} s, all of it every "
            f"{args.full_every:g} s)"
        )
    )
    print("| seconds | RSS | tracked objects | frozen | connections accepted |")
    print("|---|---|---|---|---|")
    with ExitStack() as stack:
        stack.enter_context(long_lived_frozen())
        if not args.cpython:
            stack.enter_context(collector.active())
        streams = stack.enter_context(StreamManager(runner, clock=clock, settings=settings))
        prober = Prober(runner, clock=clock, streams=streams, workers=4)
        started = time.monotonic()
        next_sample = 0.0
        while (elapsed := time.monotonic() - started) < args.seconds:
            prober.probe_all(hosts, clock.now())  # a round: asks for every stream
            collector.after_job()
            if elapsed >= next_sample:
                next_sample += args.every
                print(
                    f"| {elapsed:.0f} | {_rss_mib():.1f} MiB | {len(gc.get_objects())} "
                    f"| {gc.get_freeze_count()} | {hang_up.accepted} |",
                    flush=True,
                )
            clock.sleep(args.job)
    print(f"passes {collector.passes}, full passes {collector.full_passes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
