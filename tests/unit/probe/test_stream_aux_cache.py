"""The stream reader's aux blocks: a block that repeats the previous one up to its clock part
is read from that part alone, and must read exactly as the whole block does.

A steady host sends the same compute-apps list and GPU list every minute; only the remote clock
and the terminals' last-input times change. The reader keeps the previous block's text up to its
clock part with its sections and, for a block that starts with that text, reads only the rest
(``StreamReader._parse_block``). For any sequence of blocks — the same or other lists, exit
statuses, markers missing, twice or in odd places, junk in the clock part, a block without its
end — each must read as ``split_probe_output`` reads it, and a reader that parses every block
whole must take the same aux readings.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.probe.test_stream import health
from tests.unit.probe.test_stream_reader_cache import T0
from watchdog_gpu.probe.command import (
    BEGIN_MARKER,
    END_MARKER,
    GPUS_MARKER,
    ProbeSections,
    exit_marker,
    split_probe_output,
)
from watchdog_gpu.probe.stream_buffer import HostBuffer
from watchdog_gpu.probe.stream_reader import StreamReader

UUID = "GPU-00000000-0000-4000-8000-00000000000{}"
APPS = (
    "",
    f"{UUID.format(0)}, 8000, python3, 19024\n",
    f"{UUID.format(0)}, 8000, python3, 19024\n{UUID.format(1)}, 8001, python3, 19024\n",
    f"{UUID.format(1)}, 8001, python3, 19024\n",
)
GPUS = (
    "".join(f"GPU {gpu}: H100 (UUID: {UUID.format(gpu)})\n" for gpu in (0, 1)),
    f"GPU 0: H100 (UUID: {UUID.format(0)})\n",
    "",
)


class WholeBlocks(StreamReader):
    """A reader that reads every aux block whole."""

    def _parse_block(self, text: str) -> ProbeSections | None:
        return split_probe_output(text)


@st.composite
def blocks(draw: st.DrawFn) -> str:
    """An aux block, mostly well formed, sometimes not."""
    parts = [draw(st.sampled_from(["", "", "", "Welcome!\n"])), f"{BEGIN_MARKER}\n"]
    if draw(st.integers(0, 9)):
        parts.append(exit_marker("DMON", draw(st.sampled_from([0, 0, 1]))) + "\n")
    parts.append(draw(st.sampled_from(APPS)))
    if draw(st.integers(0, 9)):
        parts.append(exit_marker("APPS", draw(st.sampled_from([0, 0, 0, 2]))) + "\n")
    parts.append(draw(st.sampled_from(GPUS)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 0, 2]))):
        parts.append(f"{GPUS_MARKER}\n")
    clock = 1_000_000 + draw(st.integers(0, 5000))
    parts.append(draw(st.sampled_from([f"{clock}\n", f"{clock}\n", "date: not found\n", ""])))
    for _ in range(draw(st.integers(0, 3))):
        parts.append(f"{clock - draw(st.integers(0, 4000))}\n")
    parts.append(draw(st.sampled_from(["", "", "junk 12\n", exit_marker("APPS", 0) + "\n"])))
    if draw(st.integers(0, 9)):
        parts.append(f"{END_MARKER}\n")
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(blocks(), st.sampled_from(["", "", "", "1000100\n", f"{GPUS_MARKER}\n7\n"])),
        min_size=1,
        max_size=12,
    )
)
def test_a_block_read_from_its_clock_part_reads_as_the_whole_block(
    texts: list[tuple[str, str]],
) -> None:
    stream = StreamReader(HostBuffer(health()), threshold=5.0, interactive_recent_seconds=1800)
    for text, more in texts:
        assert stream._parse_block(text) == split_probe_output(text)
        # The same text and more: what it starts with is all of the previous block.
        assert stream._parse_block(text + more) == split_probe_output(text + more)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(blocks(), st.integers(0, 400)), min_size=1, max_size=12))
def test_the_aux_readings_are_those_of_a_reader_that_reads_every_block_whole(
    reads: list[tuple[str, int]],
) -> None:
    stream = StreamReader(HostBuffer(health()), threshold=5.0, interactive_recent_seconds=1800)
    whole = WholeBlocks(HostBuffer(health()), threshold=5.0, interactive_recent_seconds=1800)
    at = T0
    for number, (text, cut) in enumerate(reads):
        at += timedelta(seconds=60)
        # Whole blocks, sometimes cut in two reads.
        for piece in (text[:cut], text[cut:]) if number % 2 else (text,):
            stream.feed_stderr(piece, at)
            whole.feed_stderr(piece, at)
            assert stream.buffer.aux() == whole.buffer.aux()
            assert stream.dmon_exit == whole.dmon_exit


def test_a_steady_hosts_blocks_read_their_new_clock_and_terminals() -> None:
    stream = StreamReader(HostBuffer(health()), threshold=5.0, interactive_recent_seconds=1800)
    head = (
        f"{BEGIN_MARKER}\n{exit_marker('DMON', 0)}\n{APPS[2]}{exit_marker('APPS', 0)}\n"
        f"{GPUS[0]}{GPUS_MARKER}\n"
    )
    first = stream._parse_block(f"{head}1000000\n{END_MARKER}\n")
    second = stream._parse_block(f"{head}1000060\n999990\n{END_MARKER}\n")
    assert first is not None
    assert second is not None
    assert (first.remote_now, first.tty_input_times) == (1_000_000, ())
    assert (second.remote_now, second.tty_input_times, second.complete) == (
        1_000_060,
        (999_990,),
        True,
    )
    assert (second.apps_text, second.gpus_text) == (APPS[2], GPUS[0])
    # Another process list: read whole again.
    third = stream._parse_block(f"{head.replace(APPS[2], APPS[1])}1000120\n{END_MARKER}\n")
    assert third is not None
    assert third.apps_text == APPS[1]
