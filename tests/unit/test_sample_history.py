"""The compact sample history the fleet view holds: it keeps every sample exactly and answers
the rules' questions as a walk over the sample values would."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from watchdog_gpu.model import GpuSample, SampleSource, Verdict
from watchdog_gpu.rules.windows import sample_verdict, usable_sample
from watchdog_gpu.sample_history import (
    BUSY,
    VERDICTS,
    Repeated,
    SampleColumns,
    SampleHistory,
    instant,
    micros,
    peak,
)

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
METRIC = st.one_of(
    st.none(), st.sampled_from([0.0, 3.0, 5.0, 5.5, 12.25, 33.3, 5.000001, 90.0, 100.0])
)


@st.composite
def samples(draw: st.DrawFn) -> list[GpuSample]:
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        at = T0 + timedelta(seconds=draw(st.integers(0, 600)), microseconds=draw(st.integers(0, 3)))
        continuous = draw(st.booleans())
        rows.append(
            GpuSample(
                account="a",
                instance_id="i",
                at=at,
                gpu_index=draw(st.integers(0, 2)),
                verdict=draw(st.sampled_from(list(Verdict))),
                source=draw(st.sampled_from(list(SampleSource))),
                sm=draw(METRIC),
                mem=draw(METRIC),
                enc=draw(METRIC),
                dec=draw(METRIC),
                jpg=draw(METRIC),
                ofa=draw(METRIC),
                covers_from=at - timedelta(seconds=30) if continuous else None,
            )
        )
    return rows


def ordered(rows: list[GpuSample]) -> list[GpuSample]:
    return sorted(rows, key=lambda sample: (sample.at, sample.gpu_index))


def test_instants_are_kept_to_the_microsecond() -> None:
    at = T0 + timedelta(microseconds=123_457)
    assert instant(micros(at)) == at
    assert instant(micros(at)).isoformat() == at.isoformat()


@given(samples())
@settings(max_examples=200, deadline=None)
def test_every_sample_comes_back_as_it_was_recorded(rows: list[GpuSample]) -> None:
    history = SampleHistory.of(rows)
    assert list(history) == ordered(rows)
    assert history == tuple(ordered(rows))
    assert len(history) == len(rows)
    if rows:
        assert history[-1] == ordered(rows)[-1]
        assert history[:2] == tuple(ordered(rows)[:2])


@given(samples(), st.sampled_from([0.0, 5.0, 5.5, 33.3, 50.0]))
@settings(max_examples=200, deadline=None)
def test_verdicts_and_usability_are_the_rules_own(rows: list[GpuSample], threshold: float) -> None:
    history = SampleHistory.of(rows)
    for row, sample in zip(history.rows(), ordered(rows), strict=True):
        assert VERDICTS[history.verdict(row, threshold)] is sample_verdict(sample, threshold)
        assert history.usable(row) is usable_sample(sample)


@given(samples(), st.integers(0, 600), st.integers(0, 600))
@settings(max_examples=200, deadline=None)
def test_the_backward_walks_answer_as_a_full_walk_does(
    rows: list[GpuSample], low: int, high: int
) -> None:
    since, now = T0 + timedelta(seconds=min(low, high)), T0 + timedelta(seconds=max(low, high))
    history = SampleHistory.of(rows)
    inside = [s for s in ordered(rows) if since <= s.at <= now]
    window = history.rows(since, now)
    assert [history[row] for row in window] == inside  # a history of its own: rows from 0

    busy = [s.at for s in inside if sample_verdict(s, 5.0) is Verdict.BUSY]
    busy_at, idle_rows = history.last_busy(window, 5.0)
    assert (instant(busy_at) if busy_at is not None else None) == max(busy, default=None)
    expected_idle = [
        s
        for s in inside
        if sample_verdict(s, 5.0) is Verdict.IDLE and (not busy or s.at >= max(busy))
    ]
    assert [history[row] for row in reversed(idle_rows)] == expected_idle  # newest first
    assert history.highest_gpu(window) == max((s.gpu_index for s in inside), default=-1)

    usable = [s.at for s in ordered(rows) if s.at <= now and usable_sample(s)]
    assert history.last_usable_at(now) == max(usable, default=None)
    assert history.unusable_count(since, now) == sum(1 for s in inside if not usable_sample(s))
    assert history.recorded_busy_since(since) == any(
        s.verdict is Verdict.BUSY and s.at >= since for s in rows
    )
    newest: dict[int, Verdict] = {}
    for sample in ordered(rows):
        newest[sample.gpu_index] = sample.verdict
    assert history.newest_recorded() == newest
    assert BUSY == 0  # the codes are the arrays' values; a change is a format change


def test_a_history_reads_only_its_own_rows_while_its_columns_grow() -> None:
    first = GpuSample("a", "i", T0, 0, Verdict.IDLE, sm=0.0)
    history = SampleHistory.of([first])
    history.columns.append_sample(GpuSample("a", "i", T0 + timedelta(minutes=1), 0, Verdict.BUSY))
    assert list(history) == [first]
    assert history.last_busy(history.rows(), 5.0) == (None, [0])


def test_a_history_has_a_source_only_when_one_of_its_own_rows_has_it() -> None:
    # The store's per-instance columns keep rows older than the view (and grow after it): a
    # provider reading outside the history's rows must not count as one of its samples.
    reading = GpuSample("a", "i", T0, 0, Verdict.IDLE, sm=0.0, source=SampleSource.PROVIDER_API)
    probed = GpuSample("a", "i", T0 + timedelta(minutes=1), 0, Verdict.IDLE, sm=0.0)
    history = SampleHistory.of([reading, probed])
    later = SampleHistory("a", "i", history.columns, lo=1)
    assert history.has_source(SampleSource.PROVIDER_API)
    assert not later.has_source(SampleSource.PROVIDER_API)
    assert later.has_source(SampleSource.DMON)
    history.columns.append_sample(
        GpuSample(
            "a", "i", T0 + timedelta(minutes=2), 0, Verdict.BUSY, source=SampleSource.PROVIDER_API
        )
    )
    assert not SampleHistory("a", "i", history.columns, lo=1, hi=2).has_source(
        SampleSource.PROVIDER_API
    )


@given(samples(), samples())
@settings(max_examples=100, deadline=None)
def test_columns_of_either_precision_join_without_rounding(
    first: list[GpuSample], second: list[GpuSample]
) -> None:
    """Metrics are kept in single precision until a value needs double (33.3): joining and
    copying columns of either width keeps every value exact."""
    joined = SampleHistory.of(first).columns.copy()
    joined.extend(SampleHistory.of(second).columns)
    expected = ordered(first) + ordered(second)
    assert list(SampleHistory("a", "i", joined)) == expected
    assert list(SampleHistory("a", "i", joined.copy(1))) == expected[1:]


# The engines' columns of a real fleet: one value (0, or "-" where the GPU has no such engine)
# in nearly every row; now and then another (33.3 needs double precision).
ENGINE = st.sampled_from([None, 0.0, 33.3])


@st.composite
def steady_samples(draw: st.DrawFn) -> list[GpuSample]:
    usual = {name: draw(ENGINE) for name in ("enc", "dec", "jpg", "ofa")}
    rows = []
    for number in range(draw(st.integers(0, 12))):
        enc, dec, jpg, ofa = (
            draw(ENGINE) if draw(st.integers(0, 5)) == 0 else value for value in usual.values()
        )
        at = T0 + timedelta(seconds=draw(st.integers(0, 600)))
        sm = draw(METRIC)
        rows.append(
            GpuSample(
                "a", "i", at, number % 2, Verdict.IDLE, sm=sm, enc=enc, dec=dec, jpg=jpg, ofa=ofa
            )
        )
    return rows


@given(steady_samples(), steady_samples(), st.integers(0, 13), st.integers(0, 13))
@settings(max_examples=300, deadline=None)
def test_columns_holding_one_value_read_back_exactly_through_joins_and_sorts(
    first: list[GpuSample], second: list[GpuSample], lo: int, hi: int
) -> None:
    """The engines' columns start as a value and a count (``Repeated``) and become arrays at the
    first other value: every way of building, joining, slicing and sorting columns gives back
    exactly the samples recorded."""
    joined = SampleHistory.of(first).columns.copy()
    joined.extend(SampleHistory.of(second).columns, lo, hi)
    expected = ordered(first) + ordered(second)[lo:hi]
    assert list(SampleHistory("a", "i", joined)) == expected

    unordered = SampleColumns()
    for sample in second + first:
        unordered.append_sample(sample)
    assert list(SampleHistory("a", "i", unordered.sorted())) == ordered(second + first)


def test_a_steady_engine_column_is_a_count_until_its_first_other_value() -> None:
    columns = SampleColumns()
    for minute in range(100):
        columns.append_sample(
            GpuSample("a", "i", T0 + timedelta(minutes=minute), 0, Verdict.BUSY, sm=90.0, enc=0.0)
        )
    assert isinstance(columns.enc, Repeated)
    assert (columns.enc.value, len(columns.enc)) == (0.0, 100)
    assert isinstance(columns.dec, Repeated)  # "-": NaN throughout

    columns.append_sample(GpuSample("a", "i", T0 + timedelta(hours=2), 0, Verdict.BUSY, enc=33.3))

    assert not isinstance(columns.enc, Repeated)
    assert list(columns.enc) == [0.0] * 100 + [33.3]  # in double precision: 33.3 exactly
    history = SampleHistory("a", "i", columns)
    assert [sample.enc for sample in history] == [0.0] * 100 + [33.3]
    assert all(sample.dec is None for sample in history)


@given(
    st.lists(
        st.one_of(st.none(), st.just(math.nan), st.floats(allow_nan=False), st.integers(-3, 3)),
        max_size=6,
    )
)
@example([-0.0, 0.0])
@example([1, 1.0])
@example([None, math.nan])
@example([-5.0])
def test_peak_is_the_first_highest_present_value_or_minus_one(values: list[float | None]) -> None:
    present = [value for value in values if value is not None and not math.isnan(value)]
    expected = max(present) if present else -1.0

    result = peak(*values)

    assert result == expected
    assert type(result) is type(expected)
    assert math.copysign(1.0, result) == math.copysign(1.0, expected)  # -0.0 and 0.0
