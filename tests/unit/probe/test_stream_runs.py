"""The buffer's runs as rows arrive against the take-time path they replaced.

Before, the buffer kept every row; each tick built one ``GpuSample`` per row and
``condense_runs`` condensed them. Now ``HostBuffer`` condenses the rows into runs as they arrive
and the tick builds one sample per run (``run_samples``). Every decision reads these samples, so
for the same rows and takes both paths must give the same samples, field for field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog_gpu.model import GpuSample, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.probe.condense import condense_runs
from watchdog_gpu.probe.stream_buffer import (
    HostBuffer,
    Metrics,
    ProbeMode,
    Run,
    StreamHealth,
    StreamState,
    run_samples,
)

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
TAKE = None  # an event: the tick takes the buffer


@dataclass(frozen=True)
class Row:
    gpu: int
    at: float  # epoch seconds, as the reader hands them over
    verdict: Verdict
    metrics: Metrics


Event = Row | None


def buffer(capacity: int = 10_000) -> HostBuffer:
    health = StreamHealth(ProbeMode.STREAM, StreamState.STREAMING, ProbeStatus.OK, T0)
    return HostBuffer(health, capacity=capacity)


def old_path(rows: Sequence[Row]) -> tuple[GpuSample, ...]:
    """What a tick recorded before: a row tuple per row (the instant as epoch seconds), one
    ``GpuSample`` per row (the removed ``row_samples``), then ``condense_runs``."""
    per_row = [
        GpuSample(
            account="acct",
            instance_id="1",
            at=datetime.fromtimestamp(row.at, UTC),
            gpu_index=row.gpu,
            verdict=row.verdict,
            source=SampleSource.DMON,
            sm=row.metrics[0],
            mem=row.metrics[1],
            enc=row.metrics[2],
            dec=row.metrics[3],
            jpg=row.metrics[4],
            ofa=row.metrics[5],
        )
        for row in sorted(rows, key=lambda row: row.gpu)  # row_samples went GPU by GPU
    ]
    return condense_runs(per_row)


def new_path(events: Sequence[Event], capacity: int = 10_000) -> list[tuple[GpuSample, ...]]:
    host = buffer(capacity)
    taken: list[tuple[GpuSample, ...]] = []
    for event in [*events, TAKE]:
        if event is None:
            taken.append(run_samples(host.take(), account="acct", instance_id="1"))
        else:
            host.add_row(event.gpu, event.at, event.verdict, event.metrics)
    return taken


def shape(run: Run) -> tuple[object, ...]:
    return (run.first, run.last, run.verdict, run.metrics, run.rows)


def takes(events: Sequence[Event]) -> list[list[Row]]:
    """The rows of each take (a last take at the end)."""
    groups: list[list[Row]] = [[]]
    for event in events:
        if event is None:
            groups.append([])
        else:
            groups[-1].append(event)
    return groups


metric = st.one_of(
    st.none(),
    st.sampled_from([0.0, 1.0, 5.0, 5.5, 40.0, 100.0]),
    st.floats(min_value=0, max_value=100, allow_nan=False),
)
# Steps between rows in seconds: around the gap limit (2 s) within a microsecond either way,
# where the recorded instants (rounded to the microsecond) decide; 0 = a duplicate instant.
step = st.one_of(
    st.sampled_from([0.0, 1e-6, 0.5, 1.0, 1.999999, 2.0, 2.000001, 2.5]),
    st.floats(min_value=1.9999985, max_value=2.0000015),
    st.floats(min_value=0, max_value=12),
)


@st.composite
def streams(draw: st.DrawFn, *, backwards: bool = False) -> list[Event]:
    """Rows of up to three GPUs as a reader hands them over (epoch seconds: a read's instant,
    or a host's second mapped to ours by a fractional offset; never earlier than the previous
    row's unless ``backwards``), with takes in between. A row often repeats the previous one's
    metric values (the same object, as a repeated line)."""
    at = T0.timestamp() + draw(st.floats(min_value=0, max_value=1))
    events: list[Event] = []
    previous: dict[int, Metrics] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=60))):
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            events.append(TAKE)
            continue
        gpu = draw(st.integers(min_value=0, max_value=2))
        shift = draw(step)
        if backwards and draw(st.booleans()):
            shift = -shift
        at += shift
        if gpu in previous and draw(st.booleans()):
            metrics = previous[gpu]
        else:
            sm, mem, enc, dec, jpg, ofa = (draw(metric) for _ in range(6))
            metrics = previous[gpu] = (sm, mem, enc, dec, jpg, ofa)
        verdict = draw(st.sampled_from(list(Verdict)))
        events.append(Row(gpu, at, verdict, metrics))
    return events


@settings(max_examples=400, deadline=None)
@given(streams())
def test_runs_built_as_rows_arrive_are_the_samples_condensed_at_the_tick(
    events: list[Event],
) -> None:
    assert new_path(events) == [old_path(rows) for rows in takes(events)]


@settings(max_examples=300, deadline=None)
@given(streams(backwards=True))
def test_a_row_stamped_before_its_gpus_newest_counts_at_the_newest_instant(
    events: list[Event],
) -> None:
    # The clock stepped back: the row is taken as at its GPU's newest row (idle time observed
    # already is never extended backwards; a busy row keeps its evidence, later than it was).
    newest: dict[int, float] = {}
    clamped: list[Event] = []
    for event in events:
        if event is None:
            clamped.append(TAKE)
            continue
        at = newest[event.gpu] = max(event.at, newest.get(event.gpu, event.at))
        clamped.append(Row(event.gpu, at, event.verdict, event.metrics))
    assert new_path(events) == [old_path(rows) for rows in takes(clamped)]


@settings(max_examples=300, deadline=None)
@given(streams(), st.integers(min_value=1, max_value=4))
def test_a_full_buffer_keeps_the_newest_runs_and_counts_the_dropped_rows_as_blind(
    events: list[Event], capacity: int
) -> None:
    roomy, tight = buffer(), buffer(capacity)
    for event in [*events, TAKE]:
        if event is None:
            everything, kept = roomy.take(), tight.take()
            assert everything.dropped == 0
            for gpu, runs in everything.runs.items():
                assert [shape(run) for run in kept.runs[gpu]] == [
                    shape(run) for run in runs[-capacity:]
                ]
            lost = sum(run.rows for runs in everything.runs.values() for run in runs[:-capacity])
            assert kept.dropped == lost
            assert kept.row_count + kept.dropped == everything.row_count
        else:
            for host in (roomy, tight):
                host.add_row(event.gpu, event.at, event.verdict, event.metrics)
