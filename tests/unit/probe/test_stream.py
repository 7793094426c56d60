"""The streaming probe's pure parts: the remote command, the reader, the buffer, the outcome."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.cycles import cyclic_garbage
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.model import InstanceRef, InstanceSnapshot, InstanceState, ProbeStatus, Verdict
from watchdog_gpu.probe.command import (
    BEGIN_MARKER,
    END_MARKER,
    GPUS_MARKER,
    CommandResult,
    exit_marker,
)
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.stream_buffer import (
    HostBuffer,
    ProbeMode,
    StreamHealth,
    StreamRead,
    StreamState,
)
from watchdog_gpu.probe.stream_command import (
    DMON_EXIT_PREFIX,
    StreamCommandSpec,
    batch_loop,
    build_stream_command,
    split_aux,
)
from watchdog_gpu.probe.stream_reader import MAX_LINE, StreamReader

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
HEADER = (
    "# gpu     sm    mem    enc    dec    jpg    ofa \n"
    "# Idx      %      %      %      %      %      % \n"
)


def epoch(second: int) -> float:
    return (T0 + second * SECOND).timestamp()


def row(gpu: int, sm: object) -> str:
    return f"{gpu:>5}" + f"{sm!s:>7}" + "".join(f"{0:>7}" for _ in range(5)) + " \n"


def health(
    state: StreamState = StreamState.STREAMING, status: ProbeStatus = ProbeStatus.OK
) -> StreamHealth:
    return StreamHealth(ProbeMode.STREAM, state, status, T0, "why")


def aux(apps: str = "", gpus: str = "", ttys: Sequence[int] = (), now: int = 1_000_000) -> str:
    return "".join(
        (
            f"{BEGIN_MARKER}\n",
            exit_marker("DMON", 0) + "\n",
            apps,
            exit_marker("APPS", 0) + "\n",
            gpus,
            f"{GPUS_MARKER}\n",
            f"{now}\n",
            "".join(f"{tty}\n" for tty in ttys),
            f"{END_MARKER}\n",
        )
    )


def reader(capacity: int = 300) -> StreamReader:
    return StreamReader(
        HostBuffer(health(), capacity=capacity), threshold=5.0, interactive_recent_seconds=1800
    )


def test_the_command_is_one_fixed_text_whose_processes_die_with_the_channel() -> None:
    command = build_stream_command(StreamCommandSpec())
    assert command.startswith("sh -c '")
    assert command.endswith("'")
    body = command[len("sh -c '") : -1]
    assert "'" not in body
    assert "TZ=UTC NVSMI_SHOW_ALL_DEVICES=1 $L nvidia-smi dmon -s u -d 1 -o DT 2>&1" in body
    assert " -c " not in body.split("dmon", 1)[1].split(";", 1)[0]  # no sample count: live
    # dmon's status is echoed on the pipe's left side (sh reports only the last command's),
    # then its rows go through the batching loop.
    assert f"2>&1; echo {DMON_EXIT_PREFIX}$?=== >&2; }} | {batch_loop(5)}; kill 0" in body
    assert body.endswith("cat >/dev/null; kill 0")  # stdin EOF (channel gone) kills the group
    assert "sleep 60" in body


@pytest.mark.parametrize(
    "field", [{"interval_seconds": 0}, {"aux_interval_seconds": 1}, {"query_timeout_seconds": True}]
)
def test_the_command_takes_only_validated_integers(field: Mapping[str, object]) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        StreamCommandSpec(**field)  # type: ignore[arg-type]


def test_aux_blocks_are_cut_whole_and_a_partial_one_waits() -> None:
    text = "noise\n" + aux(ttys=[999_990]) + aux()[:20]
    blocks, rest, dmon_exit = split_aux(text)
    assert len(blocks) == 1
    sections = blocks[0].sections
    assert sections is not None
    assert sections.remote_now == 1_000_000
    assert sections.tty_input_times == (999_990,)
    assert rest.endswith(aux()[:20])
    assert dmon_exit is None
    more, rest, _ = split_aux(rest + aux()[20:])
    assert len(more) == 1
    assert rest == ""


def test_the_dmon_exit_marker_is_read_only_when_its_line_is_complete() -> None:
    assert split_aux("===WATCHDOG-GPU:STREAM-DMON-EXIT:1")[2] is None
    assert split_aux("===WATCHDOG-GPU:STREAM-DMON-EXIT:127===\n")[2] == 127


def test_rows_land_per_gpu_with_their_arrival_time_and_verdict() -> None:
    stream = reader()
    stream.feed_stdout(HEADER, T0)
    stream.feed_stdout(row(0, 40) + row(1, 0), T0 + SECOND)
    stream.feed_stdout(row(0, 3), T0 + 2 * SECOND)
    read = stream.buffer.take()
    assert sorted(read.runs) == [0, 1]
    assert [(r.first, r.last, r.verdict, r.metrics[0], r.rows) for r in read.runs[0]] == [
        (epoch(1), epoch(1), Verdict.BUSY, 40.0, 1),
        (epoch(2), epoch(2), Verdict.IDLE, 3.0, 1),
    ]
    assert stream.rows == 3
    assert stream.buffer.take().row_count == 0  # taken once


def test_rows_that_repeat_a_line_are_one_run_holding_its_metric_values() -> None:
    # A steady GPU costs one run between ticks, not a row a second, and the run keeps the
    # values of the line it repeats (docs/probe.md, memory).
    stream = reader()
    stream.feed_stdout(HEADER, T0)
    for second in range(1, 4):
        stream.feed_stdout(row(0, 7) + row(1, 0), T0 + second * SECOND)
    stream.feed_stdout(row(0, 9) + row(1, 0), T0 + 4 * SECOND)
    read = stream.buffer.take()
    (gpu0,) = read.runs[0]
    assert (gpu0.first, gpu0.last, gpu0.rows) == (epoch(1), epoch(4), 4)
    assert gpu0.metrics == (9.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # the maximum of the run
    (gpu1,) = read.runs[1]
    assert (gpu1.first, gpu1.last, gpu1.rows) == (epoch(1), epoch(4), 4)
    assert read.row_count == 8


def test_a_repeated_header_is_read_once_and_a_new_header_still_counts() -> None:
    # The simulator prints the header with every second's rows; a repeat changes nothing and is
    # not parsed again, but a header with other columns replaces the columns as before.
    stream = reader()
    for second in range(3):
        stream.feed_stdout(HEADER + row(0, 40), T0 + second * SECOND)
    wider = HEADER.replace("ofa \n", "ofa    xyz \n").replace("%      % \n", "%      %      - \n")
    stream.feed_stdout(wider + row(0, 2).replace(" \n", "      1 \n"), T0 + 3 * SECOND)
    stream.feed_stdout(HEADER + row(0, 50), T0 + 4 * SECOND)
    read = stream.buffer.take()
    assert [(r.verdict, r.metrics[0], r.rows) for r in read.runs[0]] == [
        (Verdict.BUSY, 40.0, 3),
        (Verdict.IDLE, 2.0, 1),
        (Verdict.BUSY, 50.0, 1),
    ]
    assert stream.garbage == 0
    assert stream.rows == 5


def test_a_line_cut_between_reads_is_joined_before_parsing() -> None:
    stream = reader()
    stream.feed_stdout(HEADER + row(0, 0)[:6], T0)
    assert stream.buffer.take().row_count == 0
    stream.feed_stdout(row(0, 0)[6:], T0 + SECOND)
    (only,) = stream.buffer.take().runs[0]
    assert (only.first, only.rows) == (epoch(1), 1)


@pytest.mark.parametrize("zero", ["\uff10", "\u0660"])
def test_garbage_and_non_ascii_digits_count_as_garbage_never_as_rows(zero: str) -> None:
    stream = reader()
    stream.feed_stdout(HEADER + "Segmentation fault\n" + row(0, zero), T0)
    assert stream.garbage == 2
    assert stream.buffer.take().row_count == 0
    stream.feed_stdout(row(0, 0), T0)
    assert stream.garbage == 0  # a good row resets the count


def test_an_endless_line_is_garbage_and_dropped() -> None:
    stream = reader()
    stream.feed_stdout("x" * (MAX_LINE + 1), T0)
    assert stream.garbage == 1
    stream.feed_stdout(HEADER + row(0, 0), T0)
    assert stream.buffer.take().row_count == 1


def test_an_nvidia_smi_error_text_is_an_error() -> None:
    stream = reader()
    stream.feed_stdout(
        HEADER + "Unable to determine the device handle for GPU0000:01:00.0: GPU is lost\n", T0
    )
    assert stream.error is not None
    assert stream.error.kind == "gpu_lost"


def test_a_reader_ended_by_an_nvidia_smi_error_is_freed_without_the_cyclic_collector() -> None:
    # The error is kept without its traceback: that held the reader's frame, so the reader.
    def session() -> None:
        stream = reader()
        stream.feed_stdout(HEADER + "Unable to determine the device handle: GPU is lost\n", T0)
        assert stream.error is not None
        assert stream.error.kind == "gpu_lost"

    garbage = cyclic_garbage(session)

    kept = [type(thing).__name__ for thing in garbage]
    assert "StreamReader" not in kept
    assert "DmonError" not in kept


def test_mig_rows_are_busy_with_processes_and_unknown_without() -> None:
    stream = reader()
    stream.feed_stdout(HEADER + row(0, "-"), T0)
    uuid = "GPU-00000000-0000-4000-8000-000000000000"
    stream.feed_stderr(
        aux(apps=f"{uuid}, 4242, python, 1000\n", gpus=f"GPU 0: H100 (UUID: {uuid})\n"), T0
    )
    stream.feed_stdout(row(0, "-"), T0 + SECOND)
    verdicts = [r.verdict for r in stream.buffer.take().runs[0]]
    assert verdicts == [Verdict.UNKNOWN, Verdict.BUSY]


def test_a_recent_terminal_input_is_an_interactive_login() -> None:
    stream = reader()
    stream.feed_stderr(aux(ttys=[1_000_000 - 60]), T0)
    reading = stream.buffer.aux()
    assert reading is not None
    assert reading.interactive_login is True


def test_a_full_buffer_drops_the_oldest_runs_and_counts_their_rows() -> None:
    stream = reader(capacity=3)
    stream.feed_stdout(HEADER, T0)
    for second, sm in enumerate([0, 0, 50, 0, 50, 0, 0]):  # five runs: 2 + 1 + 1 + 1 + 2 rows
        stream.feed_stdout(row(0, sm), T0 + second * SECOND)
    read = stream.buffer.take()
    assert [(r.first, r.rows) for r in read.runs[0]] == [
        (epoch(3), 1),
        (epoch(4), 1),
        (epoch(5), 2),
    ]
    assert read.dropped == 3  # the rows of the two oldest runs: blind time
    assert stream.buffer.take().dropped == 0


def test_a_steady_gpu_keeps_one_run_however_late_the_take() -> None:
    stream = reader(capacity=3)
    stream.feed_stdout(HEADER, T0)
    for second in range(600):
        stream.feed_stdout(row(0, 0), T0 + second * SECOND)
    read = stream.buffer.take()
    ((only,),) = read.runs.values()
    assert (only.first, only.last, only.rows, read.dropped) == (epoch(0), epoch(599), 600, 0)


def test_a_gpu_index_out_of_range_is_refused_by_the_buffer() -> None:
    with pytest.raises(ValueError, match="out of range"):
        HostBuffer(health()).add_row(64, epoch(0), Verdict.IDLE, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0))


# -- the prober over a stream source -------------------------------------------------------


class FakeStreams:
    def __init__(self, reads: Mapping[InstanceRef, StreamRead | None]) -> None:
        self.reads = dict(reads)
        self.synced: list[list[SshTarget]] = []

    def sync(self, targets: Sequence[SshTarget]) -> None:
        self.synced.append(list(targets))

    def take(self, ref: InstanceRef) -> StreamRead | None:
        return self.reads.get(ref)

    def health(self) -> Mapping[InstanceRef, StreamHealth]:
        return {}


class BurstOnly:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult:
        self.calls.append(target.instance_id)
        return CommandResult(stdout="", stderr="", exit_status=0, timed_out=False)


def snapshot(instance_id: str) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="acct",
        instance_id=instance_id,
        name="job",
        state=InstanceState.RUNNING,
        raw_state="running",
        observed_at=T0,
        ssh_host="10.0.0.1",
        ssh_port=22,
        gpu_count=1,
    )


def streamed(seconds: Sequence[int], sm: float = 0.0) -> StreamRead:
    stream = reader()
    stream.feed_stdout(HEADER, T0)
    for second in seconds:
        stream.feed_stdout(row(0, sm), T0 + second * SECOND)
    return stream.buffer.take()


def test_streamed_hosts_are_read_from_their_buffers_and_the_rest_probed_in_bursts() -> None:
    burst = BurstOnly()
    streams = FakeStreams({InstanceRef("acct", "1"): streamed(range(1, 61))})
    prober = Prober(burst, clock=VirtualClock(T0), streams=streams)
    first, second = prober.probe_all([snapshot("1"), snapshot("2")], T0 + 60 * SECOND)
    assert [t.instance_id for t in streams.synced[0]] == ["1", "2"]
    assert burst.calls == ["2"]
    assert (first.status, first.mode) == (ProbeStatus.OK, "stream")
    (run,) = first.samples
    assert (run.covers_from, run.at, run.verdict) == (T0 + SECOND, T0 + 60 * SECOND, Verdict.IDLE)
    assert second.mode == "burst"


def test_a_hole_in_the_stream_stays_a_hole_in_the_samples() -> None:
    read = streamed([*range(1, 21), *range(41, 61)])
    outcome = Prober(BurstOnly(), clock=VirtualClock(T0)).stream_outcome(snapshot("1"), read, T0)
    assert [(s.covers_from, s.at) for s in outcome.samples] == [
        (T0 + SECOND, T0 + 20 * SECOND),
        (T0 + 41 * SECOND, T0 + 60 * SECOND),
    ]


@pytest.mark.parametrize(
    ("state", "status", "expected"),
    [
        (StreamState.BACKOFF, ProbeStatus.UNREACHABLE, ProbeStatus.UNREACHABLE),
        (StreamState.BACKOFF, ProbeStatus.HOST_KEY_CHANGED, ProbeStatus.HOST_KEY_CHANGED),
        (StreamState.STALLED, ProbeStatus.TIMEOUT, ProbeStatus.TIMEOUT),
        (StreamState.STREAMING, ProbeStatus.OK, ProbeStatus.TIMEOUT),  # no row at all: not OK
    ],
)
def test_a_round_without_rows_is_a_failed_probe_without_samples(
    state: StreamState, status: ProbeStatus, expected: ProbeStatus
) -> None:
    read = StreamRead({}, 0, None, health(state, status))
    outcome = Prober(BurstOnly(), clock=VirtualClock(T0)).stream_outcome(snapshot("1"), read, T0)
    assert outcome.status is expected
    assert outcome.samples == ()
    assert outcome.mode == "stream"


def test_a_round_right_after_the_previous_one_is_ok_without_samples() -> None:
    # Two rounds within one batch interval of the host (an accelerated demo, a restart): the
    # host sends its rows every 5 s, so nothing new yet is no failure.
    read = StreamRead({}, 0, None, health(), last_row_at=T0)
    prober = Prober(BurstOnly(), clock=VirtualClock(T0))
    for seconds in (1, 7):
        outcome = prober.stream_outcome(snapshot("1"), read, T0 + seconds * SECOND)
        assert outcome.status is ProbeStatus.OK
        assert outcome.samples == ()
    later = prober.stream_outcome(snapshot("1"), read, T0 + 8 * SECOND)
    assert later.status is ProbeStatus.TIMEOUT
