"""One instance's GPU samples as compact columns: what the fleet view holds for the rules.

Parallel typed arrays (:class:`SampleColumns`) in time order, far smaller than one object per
sample, and :class:`SampleHistory` answers the rules from the newest rows back, so a busy
instance costs its last rows. Exact: instants are whole microseconds, metrics the stored doubles,
``None`` is NaN, and verdicts are judged as
:func:`~watchdog_gpu.rules.windows.sample_verdict` does. The engines' columns
(``enc``, ``dec``, ``jpg``, ``ofa``), nearly constant, stay a value and a count
(:class:`Repeated`) until their first other value. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import repeat
from typing import TypeAlias, overload

from watchdog_gpu.model import GpuSample, SampleSource, Verdict

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
NO_TIME = -(2**63)  # covers_from of a point sample
NAN = math.nan

BUSY, IDLE, UNKNOWN = 0, 1, 2
VERDICT_CODES = {Verdict.BUSY: BUSY, Verdict.IDLE: IDLE, Verdict.UNKNOWN: UNKNOWN}
VERDICTS = (Verdict.BUSY, Verdict.IDLE, Verdict.UNKNOWN)
SOURCES = tuple(SampleSource)
SOURCE_CODES = {source: code for code, source in enumerate(SOURCES)}


def micros(at: datetime) -> int:
    """``at`` as whole microseconds since the epoch (exact)."""
    return (at - EPOCH) // _MICRO


def instant(value: int) -> datetime:
    """The inverse of :func:`micros` (UTC)."""
    return EPOCH + timedelta(microseconds=value)


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else value


def peak(*values: float | None) -> float:
    """The highest present value (-1 when none is: no threshold, which is >= 0, is exceeded)."""
    # A loop rather than max() over a filtered list: every cached row computes one (the first
    # of equal values wins, as with max()).
    highest: float | None = None
    for value in values:
        if value is not None and value == value and (highest is None or value > highest):  # noqa: PLR0124 - not NaN
            highest = value
    return -1.0 if highest is None else highest


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # noqa: PLR0124 - NaN is the same as NaN here


def _exact_single(value: float) -> bool:
    """Whether ``value`` survives a single-precision array unchanged (NaN does)."""
    return value != value or array("f", (value,))[0] == value  # noqa: PLR0124


class Repeated:
    """A column whose every row so far holds one value: the value and how many rows (module
    docstring). Reads like an array of floats (index, slice, iterate, ``len``)."""

    __slots__ = ("count", "value")
    typecode = "r"

    def __init__(self, value: float = NAN, count: int = 0) -> None:
        self.value = value
        self.count = count

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Repeated: ...

    def __getitem__(self, index: int | slice) -> float | Repeated:
        if isinstance(index, slice):
            return Repeated(self.value, len(range(*index.indices(self.count))))
        if not -self.count <= index < self.count:
            raise IndexError(index)
        return self.value

    def __iter__(self) -> Iterator[float]:
        return repeat(self.value, self.count)

    def takes(self, value: float) -> bool:
        """Whether ``value`` can be one more row of this column."""
        return self.count == 0 or _same(value, self.value)

    def add(self, value: float, count: int = 1) -> None:
        if self.count == 0:
            self.value = value
        self.count += count

    def expanded(self, wide: bool = False) -> array[float]:
        """The rows as an array: single precision when the value is exact in it."""
        code = "d" if wide or not _exact_single(self.value) else "f"
        return array(code, repeat(self.value, self.count))


FloatColumn: TypeAlias = "array[float] | Repeated"


class SampleColumns:
    """Growable parallel arrays of samples, one row per sample (see the module docstring)."""

    __slots__ = (
        "at",
        "covers_from",
        "dec",
        "enc",
        "gpu",
        "jpg",
        "mem",
        "ofa",
        "peak",
        "sm",
        "source",
        "verdict",
    )

    def __init__(self) -> None:
        self.at = array("q")
        self.covers_from = array("q")
        self.gpu = array("h")
        self.verdict = array("b")
        self.source = array("b")
        # Single precision while every value so far is exactly a float (percentages are
        # whole numbers or halves, mostly); a column widens to double at its first value that
        # is not, so nothing is ever rounded.
        self.peak = array("f")
        self.sm = array("f")
        self.mem = array("f")
        self.enc: FloatColumn = Repeated()
        self.dec: FloatColumn = Repeated()
        self.jpg: FloatColumn = Repeated()
        self.ofa: FloatColumn = Repeated()

    def __len__(self) -> int:
        return len(self.at)

    def append(
        self,
        at: int,
        gpu: int,
        *,
        verdict: int,
        source: int,
        metrics: tuple[float | None, ...],
        covers_from: int = NO_TIME,
    ) -> None:
        """Add one row (``at``/``covers_from`` in microseconds, see :func:`micros`; codes from
        :data:`VERDICT_CODES`/:data:`SOURCE_CODES`; metrics sm, mem, enc, dec, jpg, ofa)."""
        sm, mem, enc, dec, jpg, ofa = metrics
        self.at.append(at)
        self.covers_from.append(covers_from)
        self.gpu.append(gpu)
        self.verdict.append(verdict)
        self.source.append(source)
        self._put("peak", self.peak, peak(sm, enc, dec, jpg, ofa))
        self._put("sm", self.sm, NAN if sm is None else sm)
        self._put("mem", self.mem, NAN if mem is None else mem)
        self._put("enc", self.enc, NAN if enc is None else enc)
        self._put("dec", self.dec, NAN if dec is None else dec)
        self._put("jpg", self.jpg, NAN if jpg is None else jpg)
        self._put("ofa", self.ofa, NAN if ofa is None else ofa)

    def _put(self, name: str, column: FloatColumn, value: float) -> None:
        if isinstance(column, Repeated):
            # Repeated.takes and .add, inline: every cached row passes here seven times.
            if column.count == 0:
                column.value, column.count = value, 1
                return
            kept = column.value
            if value == kept or (value != value and kept != kept):  # noqa: PLR0124 - NaN
                column.count += 1
                return
            column = column.expanded()
            setattr(self, name, column)
        column.append(value)
        if column[-1] != value and value == value:  # noqa: PLR0124 - NaN stays NaN in "f"
            wide = array("d", column)  # the earlier values are exact in both
            wide[-1] = value
            setattr(self, name, wide)  # histories read the columns through this object

    def append_sample(self, sample: GpuSample) -> None:
        self.append(
            micros(sample.at),
            sample.gpu_index,
            verdict=VERDICT_CODES[sample.verdict],
            source=SOURCE_CODES[sample.source],
            metrics=(sample.sm, sample.mem, sample.enc, sample.dec, sample.jpg, sample.ofa),
            covers_from=NO_TIME if sample.covers_from is None else micros(sample.covers_from),
        )

    def extend(self, other: SampleColumns, lo: int = 0, hi: int | None = None) -> None:
        """Append ``other``'s rows ``lo:hi``."""
        for name in SampleColumns.__slots__:
            mine, theirs = getattr(self, name), getattr(other, name)[lo:hi]
            if isinstance(mine, Repeated) or isinstance(theirs, Repeated):
                setattr(self, name, _joined(mine, theirs))
            elif mine.typecode == theirs.typecode:
                mine.extend(theirs)
            elif mine.typecode == "d":  # single precision values are exact doubles
                mine.extend(array("d", theirs))
            else:
                setattr(self, name, array("d", mine) + theirs)

    def copy(self, lo: int = 0, hi: int | None = None) -> SampleColumns:
        """A new columns object with rows ``lo:hi`` (the arrays are copied)."""
        copied = SampleColumns()
        copied.extend(self, lo, hi)
        return copied

    def sorted(self) -> SampleColumns:
        """The rows ordered by (``at``, GPU), stably (a late row was appended out of order)."""
        order = sorted(range(len(self.at)), key=lambda i: (self.at[i], self.gpu[i]))
        result = SampleColumns()
        for name in SampleColumns.__slots__:
            column = getattr(self, name)
            if isinstance(column, Repeated):  # one value in any order
                setattr(result, name, Repeated(column.value, column.count))
            else:
                setattr(result, name, array(column.typecode, [column[i] for i in order]))
        return result


def _joined(mine: FloatColumn, theirs: FloatColumn) -> FloatColumn:
    """``mine`` followed by ``theirs`` (either a :class:`Repeated`), as few bytes as exact:
    ``mine`` itself when it can take the rows."""
    if isinstance(theirs, Repeated):
        if isinstance(mine, Repeated) and (not theirs.count or mine.takes(theirs.value)):
            if theirs.count:
                mine.add(theirs.value, theirs.count)
            return mine
        if isinstance(mine, Repeated):
            mine = mine.expanded(wide=not _exact_single(theirs.value))
        elif mine.typecode == "f" and not _exact_single(theirs.value):
            mine = array("d", mine)
        mine.extend(theirs)
        return mine
    # ``theirs`` an array: ``mine`` is the Repeated one (the caller's condition).
    wide = mine.expanded(wide=theirs.typecode == "d") if isinstance(mine, Repeated) else mine
    wide.extend(theirs if wide.typecode == theirs.typecode else array(wide.typecode, theirs))
    return wide


class SampleHistory(Sequence[GpuSample]):
    """One instance's samples (rows ``lo:hi`` of ``columns``, in time order), with the
    questions the rules ask of them. The Store's cache keeps appending to its columns; a
    history only reads its own rows, which the cache never changes (rows are only ever
    appended after them, and a cache that drops or reorders rows starts new arrays)."""

    __slots__ = ("_columns", "_hi", "_lo", "account", "instance_id")

    def __init__(
        self,
        account: str,
        instance_id: str,
        columns: SampleColumns,
        lo: int = 0,
        hi: int | None = None,
    ) -> None:
        self.account = account
        self.instance_id = instance_id
        self._columns = columns
        self._lo = lo
        self._hi = len(columns) if hi is None else hi

    @classmethod
    def of(cls, samples: Iterable[GpuSample]) -> SampleHistory:
        """The history of ``samples`` (one instance's), ordered by time, then GPU (stably)."""
        ordered = sorted(samples, key=lambda sample: (sample.at, sample.gpu_index))
        columns = SampleColumns()
        for sample in ordered:
            columns.append_sample(sample)
        first = ordered[0] if ordered else None
        return cls(first.account if first else "", first.instance_id if first else "", columns)

    # --- Sequence[GpuSample]: building sample values (status, tests) ---

    def __len__(self) -> int:
        return self._hi - self._lo

    @overload
    def __getitem__(self, index: int) -> GpuSample: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[GpuSample, ...]: ...

    def __getitem__(self, index: int | slice) -> GpuSample | tuple[GpuSample, ...]:
        if isinstance(index, slice):
            return tuple(self._sample(self._lo + i) for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._sample(self._lo + index)

    def __iter__(self) -> Iterator[GpuSample]:
        for row in range(self._lo, self._hi):
            yield self._sample(row)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleHistory | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like a list

    def __repr__(self) -> str:
        return f"SampleHistory({self.account}/{self.instance_id}, {len(self)} samples)"

    def _sample(self, row: int) -> GpuSample:
        c = self._columns
        covers = c.covers_from[row]
        return GpuSample(
            account=self.account,
            instance_id=self.instance_id,
            at=instant(c.at[row]),
            gpu_index=c.gpu[row],
            verdict=VERDICTS[c.verdict[row]],
            source=SOURCES[c.source[row]],
            sm=_optional(c.sm[row]),
            mem=_optional(c.mem[row]),
            enc=_optional(c.enc[row]),
            dec=_optional(c.dec[row]),
            jpg=_optional(c.jpg[row]),
            ofa=_optional(c.ofa[row]),
            covers_from=None if covers == NO_TIME else instant(covers),
        )

    # --- what the rules ask ---

    @property
    def columns(self) -> SampleColumns:
        return self._columns

    def rows(self, since: datetime | None = None, now: datetime | None = None) -> range:
        """The row numbers with ``since <= at <= now`` (either bound may be open)."""
        at, lo, hi = self._columns.at, self._lo, self._hi
        if since is not None:
            lo = bisect_left(at, micros(since), lo, hi)
        if now is not None:
            hi = max(lo, bisect_right(at, micros(now), lo, hi))
        return range(lo, hi)

    def first_at(self) -> datetime | None:
        """The oldest sample's instant."""
        return instant(self._columns.at[self._lo]) if self._hi > self._lo else None

    def starts_after(self, at_micros: int) -> bool:
        """Whether the oldest sample is later than ``at_micros`` (:func:`micros`); ``False``
        without samples."""
        return self._hi > self._lo and self._columns.at[self._lo] > at_micros

    def verdict(self, row: int, threshold_percent: float) -> int:
        """Row ``row`` judged with ``threshold_percent``, as ``rules.windows.sample_verdict``
        judges a sample: a code (:data:`BUSY`, :data:`IDLE`, :data:`UNKNOWN`)."""
        c = self._columns
        if c.peak[row] > threshold_percent:
            return BUSY
        recorded = c.verdict[row]
        if c.sm[row] != c.sm[row]:  # no sm: a recorded busy stays busy, anything else unknown
            return BUSY if recorded == BUSY else UNKNOWN
        return UNKNOWN if recorded == UNKNOWN else IDLE

    def usable(self, row: int) -> bool:
        """``rules.windows.usable_sample`` of row ``row``: busy, or idle with a real ``sm``."""
        c = self._columns
        recorded = c.verdict[row]
        return recorded == BUSY or (recorded == IDLE and c.sm[row] == c.sm[row])

    def highest_gpu(self, rows: range) -> int:
        """The highest GPU index among ``rows`` (-1 when there are none)."""
        return max(self._columns.gpu[rows.start : rows.stop]) if rows else -1

    def last_busy(self, rows: range, threshold_percent: float) -> tuple[int | None, list[int]]:
        """The newest busy row's instant (microseconds) among ``rows`` and the idle rows at or
        after it, newest first (every idle row of ``rows`` when none is busy). Reads from the
        newest row back to the last busy one: one or two rows for a busy instance."""
        at = self._columns.at
        idle: list[int] = []
        verdict = self.verdict
        for row in reversed(rows):
            code = verdict(row, threshold_percent)
            if code == BUSY:
                busy_at = at[row]
                # Rows of the same instant sort by GPU: an idle row of a lower GPU at the
                # busy instant is still at or after it.
                for same in range(row - 1, rows.start - 1, -1):
                    if at[same] != busy_at:
                        break
                    if verdict(same, threshold_percent) == IDLE:
                        idle.append(same)
                return busy_at, idle
            if code == IDLE:
                idle.append(row)
        return None, idle

    def last_usable_at(self, now: datetime, *, readings_prove_idle: bool = True) -> datetime | None:
        """The newest usable sample at or before ``now``; without ``readings_prove_idle`` a
        provider's reading that says idle is not one (it cannot prove idle: evidence.py)."""
        c = self._columns
        api = SOURCE_CODES[SampleSource.PROVIDER_API]
        for row in reversed(self.rows(None, now)):
            if not self.usable(row):
                continue
            if readings_prove_idle or c.source[row] != api or c.verdict[row] == BUSY:
                return instant(c.at[row])
        return None

    def unusable_count(self, since: datetime, now: datetime) -> int:
        """How many samples with ``since <= at <= now`` are not usable."""
        return sum(1 for row in self.rows(since, now) if not self.usable(row))

    def has_source(self, source: SampleSource) -> bool:
        """Whether any of this history's samples came from ``source`` (a scan of its rows of
        one byte column: the columns may hold other instances' rows and older ones)."""
        column = memoryview(self._columns.source)[self._lo : self._hi]
        return SOURCE_CODES[source] in column.tobytes()

    def recorded_busy_since(self, since: datetime) -> bool:
        """Whether a sample recorded busy has ``at >= since``."""
        c = self._columns
        return any(c.verdict[row] == BUSY for row in self.rows(since))

    def newest_recorded(self) -> dict[int, Verdict]:
        """Each GPU's newest sample's recorded verdict."""
        c = self._columns
        rows = self.rows()
        gpus = set(c.gpu[rows.start : rows.stop])
        newest: dict[int, Verdict] = {}
        for row in reversed(rows):
            newest.setdefault(c.gpu[row], VERDICTS[c.verdict[row]])
            if len(newest) == len(gpus):
                break
        return newest

    def judged(self, rows: range, threshold_percent: float) -> Iterator[tuple[int, int, Verdict]]:
        """(instant in microseconds, GPU, verdict with ``threshold_percent``) of ``rows``."""
        c = self._columns
        for row in rows:
            yield c.at[row], c.gpu[row], VERDICTS[self.verdict(row, threshold_percent)]

    def coded_observation(self, row: int) -> tuple[int, int, int, int]:
        """Row ``row``'s GPU, instant, ``covers_from`` (:data:`NO_TIME` for a point sample)
        and source code (:data:`SOURCE_CODES`: cheaper than the enum to compare and hash in a
        loop over every sample)."""
        c = self._columns
        return c.gpu[row], c.at[row], c.covers_from[row], c.source[row]


def sample_history(samples: Sequence[GpuSample]) -> SampleHistory:
    """``samples`` as a history: the Store's views already hold one; a view built by hand (tests,
    the simulator's world) holds a tuple, converted here."""
    if isinstance(samples, SampleHistory):
        return samples
    return SampleHistory.of(samples)
