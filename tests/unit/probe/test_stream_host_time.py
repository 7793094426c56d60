"""Streamed rows stamped with their own host time (dmon ``-o DT``), mapped to our clock."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from watchdog_gpu.model import ProbeStatus, Verdict
from watchdog_gpu.probe.host_time import REANCHOR_SECONDS, HostClockMap, host_seconds
from watchdog_gpu.probe.stream_buffer import (
    HostBuffer,
    Metrics,
    ProbeMode,
    StreamHealth,
    StreamState,
)
from watchdog_gpu.probe.stream_reader import StreamReader

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
DATED_HEADER = (
    "#Date       Time        gpu     sm    mem    enc    dec    jpg    ofa \n"
    "#YYYYMMDD   HH:MM:SS    Idx      %      %      %      %      %      % \n"
)


def dated(host: datetime, gpu: int, sm: object = 0) -> str:
    return (
        f" {host:%Y%m%d}   {host:%H:%M:%S}{gpu:>7}{sm!s:>7}"
        + "".join(f"{0:>7}" for _ in range(5))
        + " \n"
    )


def seconds(host_start: datetime, count: int, gpus: tuple[int, ...] = (0,), sm: int = 0) -> str:
    return "".join(dated(host_start + n * SECOND, gpu, sm) for n in range(count) for gpu in gpus)


class RecordingBuffer(HostBuffer):
    """The real buffer, also keeping every row handed to it (the runs hide single rows)."""

    def __init__(self) -> None:
        health = StreamHealth(ProbeMode.STREAM, StreamState.STREAMING, ProbeStatus.OK, T0, "")
        super().__init__(health)
        self.added: list[tuple[int, float, Verdict, Metrics]] = []

    def add_grouped(
        self, groups: Iterable[tuple[float, Iterable[tuple[int, Verdict, Metrics]]]]
    ) -> None:
        groups = [(at, list(entries)) for at, entries in groups]
        self.added.extend(
            (gpu, at, v, metrics) for at, entries in groups for gpu, v, metrics in entries
        )
        super().add_grouped(groups)


def reader() -> StreamReader:
    return StreamReader(RecordingBuffer(), threshold=5.0, interactive_recent_seconds=1800)


def rows(stream: StreamReader, gpu: int = 0) -> list[tuple[int, float, Verdict, Metrics]]:
    buffer = stream.buffer
    assert isinstance(buffer, RecordingBuffer)
    return [row for row in buffer.added if row[0] == gpu]


def instants(stream: StreamReader, gpu: int = 0) -> list[float]:
    return [row[1] for row in rows(stream, gpu)]


@pytest.mark.parametrize(
    ("date", "time", "expected"),
    [
        ("20260302", "20:00:00", T0.timestamp()),
        ("20261231", "23:59:59", datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()),
        ("20240229", "00:00:00", datetime(2024, 2, 29, tzinfo=UTC).timestamp()),
    ],
)
def test_a_host_date_and_time_are_read_as_utc(date: str, time: str, expected: float) -> None:
    assert host_seconds(date, time) == expected


@pytest.mark.parametrize(
    ("date", "time"),
    [
        ("20261399", "12:00:00"),
        ("20250229", "12:00:00"),
        ("2026030", "12:00:00"),
        ("2026-03-02", "12:00:00"),
        ("２０２６０３０２", "12:00:00"),
        ("20260302", "24:00:00"),
        ("20260302", "12:60:00"),
        ("20260302", "12:00:60"),
        ("20260302", "12-00-00"),
        ("20260302", "1:00:000"),
        ("20260302", "+1:00:00"),
        ("20260302", "-"),
    ],
)
def test_what_is_not_a_date_and_a_time_has_no_host_time(date: str, time: str) -> None:
    assert host_seconds(date, time) is None


def test_a_batch_of_five_seconds_read_at_once_keeps_five_distinct_seconds() -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + dated(T0, 0) + dated(T0, 1), T0 + 0.3 * SECOND)
    stream.feed_stdout(seconds(T0 + SECOND, 5, gpus=(0, 1)), T0 + 6.4 * SECOND)
    for gpu in (0, 1):
        stamps = instants(stream, gpu)
        # The first read sets the offset (0.3 s: when dmon printed plus the network); the
        # batch's rows are placed at their own seconds, not at the batch's read instant.
        assert stamps == [(T0 + (n + 0.3) * SECOND).timestamp() for n in range(6)]
    assert stream.last_row_at == T0 + 5.3 * SECOND
    (run,) = stream.buffer.take().runs[0]  # one idle run over the six seconds
    assert (run.first, run.last, run.rows) == (
        (T0 + 0.3 * SECOND).timestamp(),
        (T0 + 5.3 * SECOND).timestamp(),
        6,
    )


@pytest.mark.parametrize(
    "skew",
    [
        timedelta(hours=-3),
        timedelta(seconds=-7),
        timedelta(0),
        timedelta(seconds=42),
        timedelta(hours=9),
    ],
)
def test_a_host_clock_skewed_either_way_maps_to_our_clock(skew: timedelta) -> None:
    stream = reader()
    host = T0 + skew  # the host's clock reads ``skew`` off ours
    stream.feed_stdout(DATED_HEADER + dated(host, 0), T0 + 0.2 * SECOND)
    stream.feed_stdout(seconds(host + SECOND, 5), T0 + 6.2 * SECOND)
    assert instants(stream) == [(T0 + (n + 0.2) * SECOND).timestamp() for n in range(6)]


def test_a_slow_packet_does_not_shift_its_rows_late_and_none_is_after_its_read() -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + dated(T0, 0), T0 + 0.2 * SECOND)
    stream.feed_stdout(seconds(T0 + SECOND, 5), T0 + 6.2 * SECOND)
    # The next batch is 3 s late on the network: its rows keep their own seconds.
    stream.feed_stdout(seconds(T0 + 6 * SECOND, 5), T0 + 14.2 * SECOND)
    assert instants(stream) == [(T0 + (n + 0.2) * SECOND).timestamp() for n in range(11)]
    # A later read that lags less lowers the offset for the reads after it; its own rows keep
    # the earlier offset, capped at the read that brought them, never before an earlier row.
    stream.feed_stdout(seconds(T0 + 11 * SECOND, 5), T0 + 15.05 * SECOND)
    stamps = instants(stream)
    assert stamps[-1] == (T0 + 15.05 * SECOND).timestamp()
    assert stamps == sorted(stamps)
    assert all(stamp <= (T0 + 15.05 * SECOND).timestamp() for stamp in stamps)


def test_rows_across_midnight_stay_one_second_apart() -> None:
    stream = reader()
    late = datetime(2026, 12, 31, 23, 59, 57, tzinfo=UTC)
    stream.feed_stdout(DATED_HEADER + seconds(late, 6), late + 5.5 * SECOND)
    stamps = instants(stream)
    assert [b - a for a, b in pairwise(stamps)] == [1.0] * 5
    assert stamps[-1] == (late + 5.5 * SECOND).timestamp()


@pytest.mark.parametrize(
    "bad",
    [
        " 20261399   20:00:01",
        " 20260302   25:00:01",
        " 2026030x   20:00:01",
        " 20260302   20:00:0١",
    ],
)
def test_a_row_with_a_garbage_date_or_time_is_garbage_never_idle(bad: str) -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + dated(T0, 0), T0)
    good = dated(T0, 0)
    stream.feed_stdout(bad + good[len(" 20260302   20:00:00") :], T0 + SECOND)
    assert stream.garbage == 1
    assert stream.rows == 1  # only the good one
    assert [row[2] for row in rows(stream)] == [Verdict.IDLE]


def test_an_error_text_under_dated_columns_is_still_an_error() -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + dated(T0, 0) + "No devices were found\n", T0)
    assert stream.error is not None
    assert stream.error.kind == "no_devices"
    assert stream.rows == 1


def test_dated_rows_that_repeat_share_their_parsed_values() -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + seconds(T0, 4, gpus=(0, 1), sm=7), T0 + 4 * SECOND)
    added = rows(stream)
    assert len(added) == 4
    assert len({id(row[3]) for row in added}) == 1  # one tuple shared: the line parsed once
    assert {row[2] for row in added} == {Verdict.BUSY}


def test_the_offset_re_anchors_when_the_host_clock_steps_back() -> None:
    clock = HostClockMap()
    clock.observe(100.5, 100.0)
    assert clock.instant(100.0, 100.5) == 100.5
    # The host's clock stepped back by a minute: its rows would land a minute early; the
    # offset re-anchors on the first read that lags more than REANCHOR_SECONDS beyond it.
    clock.observe(106.0, 45.0)
    assert clock.offset == 61.0
    assert clock.instant(45.0, 106.0) == 106.0
    clock.observe(106.0 + REANCHOR_SECONDS, 46.0)  # within the allowance: keeps the offset
    assert clock.offset == 61.0


def test_a_host_clock_stepping_forward_inside_a_batch_never_moves_a_busy_row_earlier() -> None:
    stream = reader()
    stream.feed_stdout(DATED_HEADER + dated(T0, 0), T0 + 0.2 * SECOND)
    stream.feed_stdout(seconds(T0 + SECOND, 5), T0 + 6.2 * SECOND)
    # Busy at 6 and 7 s, idle from 8 s; between 8 and 9 s the host's clock jumps a minute
    # ahead (an NTP step), all inside one batch read at 11.2 s.
    batch = (
        dated(T0 + 6 * SECOND, 0, sm=90)
        + dated(T0 + 7 * SECOND, 0, sm=90)
        + dated(T0 + 8 * SECOND, 0)
        + seconds(T0 + 69 * SECOND, 3)
    )
    stream.feed_stdout(batch, T0 + 11.2 * SECOND)
    added = rows(stream)[6:]
    truth = [T0 + (n + 0.2) * SECOND for n in (6, 7, 8, 9, 10, 11)]
    # No row is stamped before it happened (the busy ones keep their seconds: the idle clock
    # cannot start early), none after its read.
    assert [row[2] for row in added[:2]] == [Verdict.BUSY, Verdict.BUSY]
    assert all(row[1] >= real.timestamp() for row, real in zip(added, truth, strict=True))
    assert [row[1] for row in added[:3]] == [real.timestamp() for real in truth[:3]]
    assert all(row[1] <= (T0 + 11.2 * SECOND).timestamp() for row in added)
    # The next batch is stamped with the new offset: its own seconds again.
    stream.feed_stdout(seconds(T0 + 72 * SECOND, 5), T0 + 16.2 * SECOND)
    assert instants(stream)[-5:] == [(T0 + (n + 0.2) * SECOND).timestamp() for n in range(12, 17)]
