"""The stream reader against a row-by-row model of what it must hand the buffer.

The reader judges each row as it arrives, groups a read's rows by host time and maps each
group's host time to our clock once (every GPU of a host prints the same second). The model
here does every step on its own, one row at a time, with the public parts: a ``DmonLineReader``
parses each complete line, ``host_seconds`` reads a dated row's date and time, a
``HostClockMap`` observes the read's newest host time and stamps every row, ``row_verdict``
judges it and ``HostBuffer.add_row`` takes it. For the same reads — GPUs in turn, host times
repeated, out of order, stepping back and forward (clock steps), rows without a host time,
garbage, bad dates and headers that change the columns, cut anywhere — both buffers must hold
the same runs, and the reader must report the model's row count and newest row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.probe.test_stream import health
from tests.unit.probe.test_stream_host_time import DATED_HEADER
from tests.unit.probe.test_stream_reader_cache import T0, line
from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.dmon import DmonLineReader
from watchdog_gpu.probe.host_time import REANCHOR_SECONDS, HostClockMap, host_seconds
from watchdog_gpu.probe.stream_buffer import HostBuffer
from watchdog_gpu.probe.stream_reader import StreamReader
from watchdog_gpu.probe.verdicts import row_verdict

THRESHOLD = 5.0
METRICS = ("sm", "mem", "enc", "dec", "jpg", "ofa")


class RowByRow:
    """What the reader hands over, one row at a time (see the module docstring)."""

    def __init__(self) -> None:
        self.lines = DmonLineReader()
        self.clock = HostClockMap()
        self.buffer = HostBuffer(health())
        self.pending = ""
        self.rows = 0
        self.last_row_at: datetime | None = None

    def feed(self, text: str, at: datetime) -> None:
        *lines, self.pending = (self.pending + text).split("\n")
        read = []
        for text_line in lines:
            try:
                row = self.lines.read(text_line)
            except (DmonError, ValueError):
                continue
            if row is None:
                continue
            host = None
            if (self.lines.columns or ())[:2] == ("date", "time"):
                date, time = row.values["date"], row.values["time"]
                assert isinstance(date, str)
                assert isinstance(time, str)
                host = host_seconds(date, time)
                if host is None:
                    continue  # garbage: its second is unknown
            read.append((row, host))
        if not read:
            return
        read_at = at.timestamp()
        dated = [host for _, host in read if host is not None]
        if dated:
            self.clock.observe(read_at, max(dated))
        instant = read_at
        for row, host in read:
            instant = read_at if host is None else self.clock.instant(host, read_at)
            verdict = row_verdict(row, threshold=THRESHOLD, processes=None)
            sm, mem, enc, dec, jpg, ofa = (row.metric(name) for name in METRICS)
            self.buffer.add_row(row.gpu, instant, verdict, (sm, mem, enc, dec, jpg, ofa))
        self.rows += len(read)
        self.last_row_at = at if instant == read_at else datetime.fromtimestamp(instant, UTC)


@st.composite
def reads(draw: st.DrawFn) -> list[tuple[str, float]]:
    """(text, read instant in seconds after T0): dmon's stdout in pieces cut anywhere."""
    events: list[tuple[str, float]] = [(DATED_HEADER, 0.0)]
    second, at = 0, 0.5
    for _ in range(draw(st.integers(min_value=1, max_value=20))):
        text = ""
        for _ in range(draw(st.integers(min_value=1, max_value=12))):
            # Mostly a second a step; sometimes the same second again, a second back, or the
            # host's clock stepping back or forward.
            second += draw(st.sampled_from([0, 1, 1, 1, 1, 3, -1, -40, 30]))
            text += line(draw, second)
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        at += draw(st.floats(min_value=0.0, max_value=8.0))
        events.append((text[:cut], at))
        at += draw(st.floats(min_value=0.0, max_value=0.5))
        events.append((text[cut:], at))
    return events


@settings(max_examples=200, deadline=None)
@given(reads())
def test_the_reader_hands_over_what_a_row_by_row_model_does(
    events: list[tuple[str, float]],
) -> None:
    stream = StreamReader(HostBuffer(health()), threshold=THRESHOLD, interactive_recent_seconds=60)
    model = RowByRow()
    for text, seconds in events:
        at = T0 + timedelta(seconds=seconds)
        stream.feed_stdout(text, at)
        model.feed(text, at)
        assert (stream.rows, stream.last_row_at) == (model.rows, model.last_row_at)
    taken, expected = stream.buffer.take(), model.buffer.take()
    assert taken.dropped == expected.dropped
    assert taken.last_row_at == expected.last_row_at
    assert {
        gpu: [(r.first, r.last, r.verdict, r.metrics, r.rows) for r in runs]
        for gpu, runs in taken.runs.items()
    } == {
        gpu: [(r.first, r.last, r.verdict, r.metrics, r.rows) for r in runs]
        for gpu, runs in expected.runs.items()
    }


class FormulaClock:
    """``HostClockMap`` as its docstring says it, written plainly: each read is observed, then
    each row is at ``max(min(host + offset, read_at), last)``, a row without host time at the
    read."""

    def __init__(self) -> None:
        self.offset: float | None = None
        self.stamping: float | None = None
        self.last = float("-inf")

    def read(self, hosts: list[float | None], read_at: float) -> list[float]:
        dated = [host for host in hosts if host is not None]
        if dated:
            lag, before = read_at - max(dated), self.offset
            if before is None:
                self.offset = self.stamping = lag
            else:
                after = lag if lag < before or lag > before + REANCHOR_SECONDS else before
                self.offset, self.stamping = after, max(before, after)
        instants = []
        for host in hosts:
            if host is None:
                instants.append(read_at)
            else:
                assert self.stamping is not None
                self.last = max(min(host + self.stamping, read_at), self.last)
                instants.append(self.last)
        return instants


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=10.0),  # seconds since the previous read
            st.lists(st.one_of(st.none(), st.integers(min_value=-50, max_value=50)), min_size=1),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_host_clock_map_stamps_as_its_formula_says(
    reads: list[tuple[float, list[int | None]]],
) -> None:
    clock, formula = HostClockMap(), FormulaClock()
    read_at = T0.timestamp()
    for pause, seconds in reads:
        read_at += pause
        hosts = [None if second is None else T0.timestamp() + second for second in seconds]
        assert clock.read(hosts, read_at) == formula.read(hosts, read_at)


@settings(max_examples=100, deadline=None)
@given(reads())
def test_carriage_returns_before_line_ends_change_nothing(
    events: list[tuple[str, float]],
) -> None:
    plain = StreamReader(HostBuffer(health()), threshold=THRESHOLD, interactive_recent_seconds=60)
    crlf = StreamReader(HostBuffer(health()), threshold=THRESHOLD, interactive_recent_seconds=60)
    for text, seconds in events:
        at = T0 + timedelta(seconds=seconds)
        plain.feed_stdout(text, at)
        crlf.feed_stdout(text.replace("\n", "\r\n"), at)
        assert (crlf.rows, crlf.garbage, crlf.last_row_at) == (
            plain.rows,
            plain.garbage,
            plain.last_row_at,
        )
    taken, expected = crlf.buffer.take(), plain.buffer.take()
    assert {
        gpu: [(r.first, r.last, r.verdict, r.metrics, r.rows) for r in runs]
        for gpu, runs in taken.runs.items()
    } == {
        gpu: [(r.first, r.last, r.verdict, r.metrics, r.rows) for r in runs]
        for gpu, runs in expected.runs.items()
    }
