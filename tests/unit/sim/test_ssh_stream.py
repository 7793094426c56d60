"""The simulator's streams send what the real streaming command sends: dated rows in batches."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.sim.test_world import START, one_instance, world_of
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.stream_buffer import StreamRead
from watchdog_gpu.sim.ssh_stream import SimulatedStreams

TARGET = SshTarget("a", "1", "10.0.0.1", 22)


def spans(read: StreamRead | None) -> list[tuple[float, float, int]]:
    """GPU 0's runs: (first, last) seconds after the start, and their row count."""
    assert read is not None
    return [
        (run.first - START.timestamp(), run.last - START.timestamp(), run.rows)
        for run in read.runs.get(0, ())
    ]


def idle_host_streams(horizon: str) -> tuple[SimulatedStreams, VirtualClock]:
    """Streams (5 s batches) of one host whose GPU is idle from the start, and the clock."""
    world, clock = world_of(
        one_instance(events='{ at = "0s", state = "running", gpu_util = 0 }'), horizon
    )
    streams = SimulatedStreams(world, batch_seconds=5)
    streams.sync([TARGET])
    return streams, clock


def test_rows_come_in_batches_each_at_its_own_second() -> None:
    streams, clock = idle_host_streams("1h")
    clock.advance(timedelta(seconds=1))
    first = streams.take(TARGET.ref)
    assert first is not None
    # The first row comes at once (the header and the first second).
    assert spans(first) == [(1, 1, 1)]
    clock.advance(timedelta(seconds=4))
    assert streams.take(TARGET.ref).row_count == 0  # type: ignore[union-attr]  # on the host
    clock.advance(timedelta(seconds=1))
    batch = streams.take(TARGET.ref)
    assert batch is not None
    # Seconds 2-5 arrive together when the fifth new second (6 s) begins, each at its own
    # second; then every 5 s: 6-10 at 11 s.
    assert spans(batch) == [(2, 5, 4)]
    clock.advance(timedelta(seconds=4))
    assert streams.take(TARGET.ref).row_count == 0  # type: ignore[union-attr]
    clock.advance(timedelta(seconds=1))
    later = streams.take(TARGET.ref)
    assert later is not None
    assert spans(later) == [(6, 10, 5)]
    assert {run.verdict for run in batch.runs[0]} == {Verdict.IDLE}


def test_a_blind_second_ends_the_session_and_loses_what_the_host_kept() -> None:
    events = '{ at = "0s", state = "running", gpu_util = 0 }, { at = "4s", ssh = "down" }, ' + (
        '{ at = "6s", ssh = "up" }'
    )
    world, clock = world_of(one_instance(events=events), "1h")
    streams = SimulatedStreams(world, batch_seconds=5)
    streams.sync([TARGET])
    clock.advance(timedelta(seconds=8))
    read = streams.take(TARGET.ref)
    assert read is not None
    # Second 1 came at once; 2-3 were kept on the host and died with the session; the new
    # session's first row (6 s) came at once; 7-8 wait for its next batch.
    assert spans(read) == [(1, 1, 1), (6, 6, 1)]


def test_a_take_far_later_than_the_buffer_capacity_still_sees_every_second() -> None:
    # A real reader thread keeps reading while the tick is late, and a steady GPU is one run
    # however long: the simulated stream must not turn the seconds beyond the buffer's
    # capacity (300 runs) into blind time.
    streams, clock = idle_host_streams("2h")
    clock.advance(timedelta(minutes=20))
    read = streams.take(TARGET.ref)
    assert read is not None
    assert read.dropped == 0
    # One run from the first second to the last batch sent (the host keeps the rest).
    assert spans(read) == [(1, 1195, 1195)]
