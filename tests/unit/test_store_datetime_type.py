"""UtcDateTime's one-step SQLite processors against the decorator's generic two steps.

On SQLite the column type binds an instant straight to SQLAlchemy's DATETIME text and reads it
back in one function (a tick binds and reads tens of thousands). The text written and the
values read must be those of ``TypeDecorator``'s own path (``process_bind_param`` then the
dialect's formatting; the dialect's parsing then ``process_result_value``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite
from sqlalchemy.types import TypeDecorator

from watchdog_gpu.store import types
from watchdog_gpu.store.types import UtcDateTime
from watchdog_gpu.store.values import NaiveDatetimeError, bind_time

DIALECT = sqlite.dialect()
TYPE = cast(UtcDateTime, UtcDateTime().dialect_impl(DIALECT))
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
MICRO = timedelta(microseconds=1)
instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=offsets
)


def _bind(fused: bool) -> Any:
    processor = (
        TYPE.bind_processor(DIALECT) if fused else TypeDecorator.bind_processor(TYPE, DIALECT)
    )
    assert processor is not None
    return processor


@given(instants)
def test_an_instant_is_written_as_the_generic_path_writes_it(instant: datetime) -> None:
    fused, generic = _bind(fused=True), _bind(fused=False)
    assert fused(instant) == generic(instant)


@given(instants)
def test_the_text_written_is_read_back_as_the_generic_path_reads_it(instant: datetime) -> None:
    text = _bind(fused=True)(instant)
    fused = TYPE.result_processor(DIALECT, None)
    generic: Any = TypeDecorator.result_processor(TYPE, DIALECT, None)
    assert fused is not None
    assert generic is not None
    assert fused(text) == generic(text) == instant.astimezone(UTC)
    assert fused(text) is not None
    assert fused(text).tzinfo is UTC


def test_none_stays_none_and_what_is_not_an_aware_datetime_is_refused() -> None:
    bind = _bind(fused=True)
    read = TYPE.result_processor(DIALECT, None)
    assert read is not None
    # The one-step processors are the ones SQLite gets (not the generic fallback).
    assert bind.__qualname__.startswith("UtcDateTime.bind_processor")
    assert read.__qualname__.startswith("UtcDateTime.result_processor")
    assert bind(None) is None
    assert read(None) is None
    with pytest.raises(NaiveDatetimeError):
        bind(datetime(2026, 3, 2, 20, 0))  # naive: the point
    with pytest.raises(TypeError):
        bind("2026-03-02 20:00:00")


@given(
    instants,
    st.sampled_from([" ", "T"]),
    st.sampled_from(["auto", "seconds", "milliseconds", "microseconds"]),
    st.booleans(),
)
def test_a_text_of_another_shape_is_read_as_the_generic_path_reads_it(
    instant: datetime, separator: str, timespec: str, offset: bool
) -> None:
    # What another writer may have left (an offset of its own, a "T", fewer digits): only
    # the text bind_time writes takes the one-call parse, every other reads as before.
    text = (instant if offset else instant.replace(tzinfo=None)).isoformat(separator, timespec)
    fused = TYPE.result_processor(DIALECT, None)
    generic: Any = TypeDecorator.result_processor(TYPE, DIALECT, None)
    assert fused is not None
    assert fused(text) == generic(text)
    assert fused(text).tzinfo is UTC


def test_a_canonical_length_text_with_an_offset_keeps_its_offset() -> None:
    read = TYPE.result_processor(DIALECT, None)
    assert read is not None
    text = "2026-03-02 20:00:00.1+0500"  # 26 characters, "." at 19: looks canonical
    assert len(text) == 26
    assert read(text) == datetime(2026, 3, 2, 15, 0, 0, 100000, tzinfo=UTC)


def _bind_time_by_conversion(moment: datetime) -> str:
    """``bind_time``'s text by the general conversion (to UTC, naive, formatted)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


@given(
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    )
)
def test_an_instant_already_in_utc_is_written_as_the_conversion_writes_it(
    instant: datetime,
) -> None:
    # bind_time takes a short cut for datetime.UTC instants: the same text, microseconds
    # always written (also when they are 0), nothing of the offset left.
    assert instant.tzinfo is UTC
    assert bind_time(instant) == _bind_time_by_conversion(instant)
    assert len(bind_time(instant)) == 26


@given(instants)
def test_an_instant_of_another_zone_is_written_as_the_conversion_writes_it(
    instant: datetime,
) -> None:
    assert bind_time(instant) == _bind_time_by_conversion(instant)
    assert bind_time(instant) == bind_time(instant.astimezone(UTC))


def test_bind_time_refuses_a_naive_instant_and_one_whose_zone_gives_no_offset() -> None:
    class NoOffset(tzinfo):
        def utcoffset(self, _moment: datetime | None) -> timedelta | None:
            return None

        def dst(self, _moment: datetime | None) -> timedelta | None:
            return None

        def tzname(self, _moment: datetime | None) -> str | None:
            return None

    with pytest.raises(NaiveDatetimeError):
        bind_time(datetime(2026, 3, 2, 20, 0))  # naive: the point
    with pytest.raises(NaiveDatetimeError):
        bind_time(datetime(2026, 3, 2, 20, 0, tzinfo=NoOffset()))


@given(
    st.lists(
        st.tuples(instants, st.integers(0, 3)).map(
            # Instants a microsecond, a second or a day apart: texts that differ in one digit.
            lambda pair: pair[0] + (timedelta(), MICRO, timedelta(seconds=1), timedelta(1))[pair[1]]
        ),
        min_size=1,
        max_size=12,
    )
)
def test_instants_read_again_are_what_the_generic_path_reads(moments: list[datetime]) -> None:
    # A canonical text read once is kept by its text: every later read of it, and of texts
    # that differ from it in a digit, still gives the generic path's instant.
    fused = TYPE.result_processor(DIALECT, None)
    generic: Any = TypeDecorator.result_processor(TYPE, DIALECT, None)
    assert fused is not None
    texts = [bind_time(moment) for moment in moments]
    for text in [*texts, *reversed(texts), *texts]:
        assert fused(text) == generic(text)
        assert fused(text).tzinfo is UTC


def test_the_instants_kept_are_forgotten_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(types, "_READ_INSTANTS", {})
    monkeypatch.setattr(types, "_MAX_READ_INSTANTS", 3)
    read = TYPE.result_processor(DIALECT, None)  # a new processor: it takes the new dict
    assert read is not None
    moments = [datetime(2026, 3, 2, 20, 0, second, tzinfo=UTC) for second in range(10)]
    for moment in [*moments, *moments]:
        assert read(bind_time(moment)) == moment
        assert 1 <= len(types._READ_INSTANTS) <= 3
    assert read(bind_time(moments[-1])) is read(bind_time(moments[-1]))  # kept: one object
