"""The stream reader's per-line caches against a reader that remembers no line.

A steady stream repeats the same few lines, so the reader parses each distinct data line once,
keeps its verdict under the newest aux reading, reuses the last date and time it parsed, and
hands a read's rows to the buffer at once; an aux block listing what the previous one listed
keeps its process counts. A reader whose caches never answer parses every line and every aux
block afresh and judges every row: for the same text, read in the same pieces with the same aux
blocks in between, both must hand the buffer the same runs and report the same state.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.probe.test_stream import HEADER, aux, health, row
from tests.unit.probe.test_stream_host_time import DATED_HEADER
from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.stream_buffer import HostBuffer
from watchdog_gpu.probe.stream_reader import StreamReader

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
UUID = "GPU-00000000-0000-4000-8000-00000000000{}"
GPU_LIST = "".join(f"GPU {gpu}: H100 (UUID: {UUID.format(gpu)})\n" for gpu in (0, 1))


class _Forgetful(dict[Any, Any]):
    """A line cache that never answers: every line is parsed and every row judged anew."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def reader(*, cached: bool) -> StreamReader:
    stream = StreamReader(HostBuffer(health()), threshold=5.0, interactive_recent_seconds=1800)
    if not cached:
        stream._parsed = _Forgetful()
    return stream


def line(draw: st.DrawFn, second: int) -> str:
    gpu = draw(st.sampled_from([0, 1]))
    sm = draw(st.sampled_from([0, 0, 3, 50, 90, "-"]))  # "-": a MIG row, judged by processes
    kind = draw(st.sampled_from(["dated"] * 8 + ["bad date", "garbage", "header", "undated"]))
    host = T0 + timedelta(seconds=second)
    values = f"{sm!s:>7}" + "".join(f"{0:>7}" for _ in range(5)) + " \n"
    if kind == "dated":
        return f" {host:%Y%m%d}   {host:%H:%M:%S}{gpu:>7}" + values
    if kind == "bad date":
        return f" 20261399   {host:%H:%M:%S}{gpu:>7}" + values
    if kind == "garbage":
        return "no dmon row here\n"
    if kind == "header":
        return draw(st.sampled_from([DATED_HEADER, HEADER]))  # the columns may change
    return row(gpu, sm)


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[str, str, float]]:
    """(stream, text, read instant in seconds after T0) in order: dmon's stdout in pieces cut
    anywhere, and aux blocks on stderr with or without compute processes."""
    events: list[tuple[str, str, float]] = [("stdout", DATED_HEADER, 0.0)]
    second, at = 0, 0.5
    for _ in range(draw(st.integers(min_value=1, max_value=25))):
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            apps = draw(
                st.sampled_from(["", *(f"{UUID.format(g)}, 42, python, 9\n" for g in (0, 1))])
            )
            gpus = draw(st.sampled_from([GPU_LIST, GPU_LIST.splitlines(keepends=True)[0], ""]))
            events.append(("stderr", aux(apps=apps, gpus=gpus), at))
            continue
        text = ""
        for _ in range(draw(st.integers(min_value=1, max_value=12))):
            second += draw(st.sampled_from([0, 1, 1, 1, 3]))
            text += line(draw, second)
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        at = max(at, second + draw(st.floats(min_value=0.1, max_value=4.0)))
        events.append(("stdout", text[:cut], at))
        events.append(("stdout", text[cut:], at + 0.25))
    return events


def state(stream: StreamReader) -> tuple[object, ...]:
    read = stream.buffer.take()
    runs = {
        gpu: [(r.first, r.last, r.verdict, r.metrics, r.rows) for r in gpu_runs]
        for gpu, gpu_runs in read.runs.items()
    }
    error = None if stream.error is None else stream.error.kind
    return (runs, read.dropped, stream.rows, stream.garbage, error, stream.last_row_at)


@settings(max_examples=300, deadline=None)
@given(sessions())
def test_the_cached_reader_hands_over_what_a_reader_without_caches_does(
    events: list[tuple[str, str, float]],
) -> None:
    cached, fresh = reader(cached=True), reader(cached=False)
    for stream, text, seconds in events:
        at = T0 + timedelta(seconds=seconds)
        for target in (cached, fresh):
            if stream == "stdout":
                target.feed_stdout(text, at)
            else:
                target.feed_stderr(text, at)
        fresh._processes_key = None  # the reference keeps no aux reading's processes either
        assert state(cached) == state(fresh)


def test_an_aux_block_repeated_after_a_new_gpu_appeared_counts_its_processes_anew() -> None:
    # No GPU list, one process nobody can place: it belongs to the only GPU seen, then (a
    # second GPU printed rows) to every GPU — the same aux text, another answer.
    stream = reader(cached=True)
    block = aux(apps=f"{UUID.format(7)}, 42, python, 9\n")
    first = f" {T0:%Y%m%d}   {T0:%H:%M:%S}"
    stream.feed_stdout(DATED_HEADER + first + f"{0:>7}" + row(0, "-")[5:], T0)
    stream.feed_stderr(block, T0)
    stream.feed_stdout(first + f"{1:>7}" + row(1, "-")[5:], T0 + timedelta(seconds=1))
    stream.feed_stderr(block, T0 + timedelta(seconds=1))
    later = T0 + timedelta(seconds=2)
    stream.feed_stdout(f" {later:%Y%m%d}   {later:%H:%M:%S}{1:>7}" + row(1, "-")[5:], later)
    reading = stream.buffer.aux()
    assert reading is not None
    assert reading.processes == {0: 1, 1: 1}
    verdicts = [run.verdict for run in stream.buffer.take().runs[1]]
    assert verdicts == [Verdict.UNKNOWN, Verdict.BUSY]  # MIG rows: busy once a process counts
