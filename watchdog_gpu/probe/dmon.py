"""Parse the text of ``nvidia-smi dmon`` into rows keyed by the header's column names.

Pure. Values are mapped by column name, never by offset (drivers changed widths and added
columns); ``-`` becomes ``None``, never 0; a repeated header is re-read and a different one
replaces the columns; a last line cut by a dropped session is dropped unless provably complete;
nvidia-smi's error texts raise :class:`~watchdog_gpu.errors.DmonError` with their kind.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.host_time import host_seconds

DmonValue = int | float | str | None

# Columns kept as text: ``-o D`` prints YYYYMMDD, ``-o T`` prints HH:MM:SS.
TEXT_COLUMNS = frozenset({"date", "time"})
# Tokens that mean "not available". dmon prints ``-``; the bracketed forms are what the CSV queries
# print, accepted so a future dmon spelling is read as unknown rather than rejected as garbage.
UNAVAILABLE_TOKENS = frozenset({"-", "n/a", "[n/a]"})

# (kind, pattern) checked in order on every line that is neither a header nor a data row; the
# first match names the error. Specific NVML texts come before the catch-all "Failed to initialize".
_ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("nvml_missing", r"couldn't find libnvidia-ml|libnvidia-ml\.so.*not found"),
        ("nvml_missing", r"nvidia-smi: (command )?not found"),
        ("version_mismatch", r"version mismatch"),
        ("driver_not_loaded", r"couldn't communicate with the nvidia driver"),
        ("driver_not_loaded", r"driver (is )?not loaded"),
        ("no_devices", r"no devices (were )?found"),
        ("gpu_lost", r"unable to determine the device handle|gpu is lost|fallen off the bus"),
        ("not_supported", r"\bnot supported\b"),
        ("invalid_argument", r"is not a valid field|\binvalid\b|not recognized|unrecognized"),
        ("invalid_argument", r"failed to process command line|please run 'nvidia-smi -h'"),
        # NVML init failures with other reasons (Unknown Error in a container that lost its device
        # cgroup, Insufficient Permissions): nvidia-smi cannot talk to the driver.
        ("driver_not_loaded", r"failed to initialize nvml"),
    )
)
_DEVICE_LIMIT_WARNING = re.compile(r"only monitoring up to \d+ gpus", re.IGNORECASE)
# ASCII digits only: Python's ``\d``, ``int()`` and ``float()`` also accept full-width ``０`` and
# Arabic-Indic ``٠``, which no nvidia-smi prints; such a token is unreadable, never a zero (idle).
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")
# The highest GPU index a row may carry: NVML enumerates far fewer devices per host; a larger
# index is a garbled row, not a GPU (and must not make the rules expect thousands of GPUs).
MAX_GPU_INDEX = 63
_MAX_SNIPPET = 80
_MAX_MESSAGE = 300


_PERCENTS = tuple(float(value) for value in range(101))


@dataclass(frozen=True, slots=True)
class DmonRow:
    """One data row: ``values`` maps each lowercase column name (in header order) to an ``int``
    or ``float``, a ``str`` for ``date``/``time``, or ``None`` for ``-``. ``line`` is 1-based."""

    line: int
    values: Mapping[str, DmonValue]

    @property
    def gpu(self) -> int:
        """The GPU index as printed in the ``gpu``/``Idx`` column."""
        value = self.values["gpu"]
        assert isinstance(value, int)
        return value

    def metric(self, name: str) -> float | None:
        """A numeric column as float; ``None`` when printed ``-`` or when the column is absent."""
        value = self.values.get(name)
        if type(value) is int and 0 <= value <= 100:
            return _PERCENTS[value]  # shared: every streamed line keeps its metric values
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class DmonTable:
    """A parsed dmon run. ``columns`` lists every column name seen, in order of appearance;
    ``notes`` explains each line that was skipped (warnings, a truncated last line, a mid-stream
    line that did not match the header); ``device_limit_warning`` is True when nvidia-smi said it
    monitors only the first few GPUs (<= 535 with more than 4 GPUs: GPUs beyond are missing)."""

    columns: tuple[str, ...]
    rows: tuple[DmonRow, ...]
    notes: tuple[str, ...] = ()
    device_limit_warning: bool = False

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The distinct GPU indices in the rows, ascending."""
        return tuple(sorted({row.gpu for row in self.rows}))


def classify_error_line(line: str) -> str | None:
    """The ``DmonError`` kind an nvidia-smi error line names, or ``None`` if it names none."""
    for kind, pattern in _ERROR_PATTERNS:
        if pattern.search(line):
            return kind
    return None


def raise_for_error_lines(lines: Sequence[str]) -> None:
    """Raise ``DmonError`` for the first line that is a known nvidia-smi error text."""
    for text in lines:
        kind = classify_error_line(text)
        if kind is not None:
            raise DmonError(kind, text.strip()[:_MAX_MESSAGE])


def snippet(text: str) -> str:
    """A short, quoted excerpt of a line for messages (never the whole payload)."""
    text = text.strip()
    if len(text) > _MAX_SNIPPET:
        text = text[:_MAX_SNIPPET] + "…"
    return repr(text)


def parse_value(column: str, token: str) -> DmonValue:
    """One token of column ``column``: text for date/time, ``None`` for ``-``, else a number
    (``int`` when integral). Raises ``ValueError`` for anything else."""
    if column in TEXT_COLUMNS:
        if not token.isascii():
            raise ValueError(f"not ASCII: {snippet(token)}")
        return token
    if token.lower() in UNAVAILABLE_TOKENS:
        return None
    if _INT.fullmatch(token):
        return int(token)
    if _FLOAT.fullmatch(token):
        number = float(token)
        return int(number) if number.is_integer() else number
    raise ValueError(f"not a number: {snippet(token)}")


@dataclass(slots=True)
class _State:
    columns: tuple[str, ...] | None = None
    seen_columns: list[str] = field(default_factory=list)
    rows: list[DmonRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # non-header lines that were not rows
    limit_warning: bool = False


def parse_dmon(text: str, *, dated: bool = False) -> DmonTable:
    """Parse the complete output of one ``nvidia-smi dmon`` run.

    ``dated``: a row whose printed date or time (``-o DT``) is not one is garbage, as the
    streaming probe reads it (``docs/probe.md``); without it such a row is kept and only its
    time is not used (the burst probe spaces rows evenly then, see ``samples.row_times``).

    Given the text (any line ends; a final line without a line end is treated as possibly cut),
    return the table of rows. Raise ``DmonError`` with the kind of a known error text found on any
    non-row line, or ``unparseable`` for empty output, pmon/CSV output, a header without a ``gpu``
    column, or lines of which none matched a header. A header followed by no rows is not an error:
    the table is empty.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    complete = len(lines) - 1  # the piece after the last "\n" has no line end
    state = _State()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("#"):
            _read_header(state, line, number)
            continue
        _read_data_line(state, line, number, terminated=number <= complete, dated=dated)
    raise_for_error_lines(state.stray)
    if not state.rows and state.columns is None:
        if not state.stray:
            raise DmonError("unparseable", "empty output: no dmon header and no rows")
        raise DmonError(
            "unparseable", f"no dmon header line found; first line {snippet(state.stray[0])}"
        )
    if not state.rows and state.stray:
        raise DmonError(
            "unparseable", f"no line matched the dmon header; first was {snippet(state.stray[0])}"
        )
    return DmonTable(
        columns=tuple(state.seen_columns),
        rows=tuple(state.rows),
        notes=tuple(state.notes),
        device_limit_warning=state.limit_warning,
    )


def _header_columns(line: str, number: int) -> tuple[str, ...] | None:
    """The column names of a ``#`` header line; ``None`` for the units line or a comment."""
    names = _header_names(line)
    if "gpu" not in names:
        return None  # the units line (``# Idx W C …``) or a comment
    if "pid" in names:
        raise DmonError("unparseable", "this is nvidia-smi pmon output (per process), not dmon")
    if len(set(names)) != len(names):
        raise DmonError("unparseable", f"duplicate column names in header line {number}")
    return names


@functools.lru_cache(maxsize=64)
def _header_names(line: str) -> tuple[str, ...]:
    # One tuple of interned names per header text, however many streams print it: each
    # streaming session keeps its columns for as long as it runs (thousands of hosts).
    return tuple(sys.intern(token.lower()) for token in line.strip().lstrip("#").split())


def _read_header(state: _State, line: str, number: int) -> None:
    names = _header_columns(line, number)
    if names is None:
        return
    if state.columns is not None and names != state.columns:
        state.notes.append(f"line {number}: a different header replaces the columns")
    state.columns = names
    state.seen_columns.extend(name for name in names if name not in state.seen_columns)


def _read_data_line(
    state: _State, line: str, number: int, *, terminated: bool, dated: bool
) -> None:
    if _DEVICE_LIMIT_WARNING.search(line):
        state.limit_warning = True
    tokens = line.split()
    columns = state.columns
    if columns is None or len(tokens) != len(columns):
        _skip(state, line, number, terminated=terminated)
        return
    # Without a line end the last token may be cut ("345" → "34"); only a trailing space proves
    # the line complete (drivers >= 525 end every row with one).
    if not terminated and not line[-1].isspace():
        state.notes.append(f"line {number}: dropped, cut off before its line end")
        return
    try:
        row = _row(columns, tokens, number)
        if dated:
            _check_printed_time(row)
    except ValueError as error:
        _skip(state, line, number, terminated=terminated, reason=str(error))
        return
    state.rows.append(row)


def _check_printed_time(row: DmonRow) -> None:
    """``ValueError`` when the row's printed date or time (``-o D``/``-o T``) is not one
    (``20261399``, ``25:00:00``): such a row is garbage, never a sample. The same judgement as
    the streaming reader's when it maps the row's host time (``host_time.host_seconds``)."""
    date, time = row.values.get("date"), row.values.get("time")
    if date is None and time is None:
        return
    # host_seconds judges a date and a time together: the column not printed is any valid one.
    date_text = date if isinstance(date, str) else "19700101"
    time_text = time if isinstance(time, str) else "00:00:00"
    if host_seconds(date_text, time_text) is None:
        raise ValueError(f"its date or time is not one: {snippet(f'{date_text} {time_text}')}")


def _row(columns: Sequence[str], tokens: Sequence[str], number: int) -> DmonRow:
    """The row of ``tokens`` under ``columns``; ``ValueError`` when a value or the GPU index
    is unreadable."""
    values = {name: parse_value(name, token) for name, token in zip(columns, tokens, strict=True)}
    gpu = values["gpu"]
    if not isinstance(gpu, int) or not 0 <= gpu <= MAX_GPU_INDEX:
        raise ValueError("no GPU index")
    return DmonRow(line=number, values=values)


class DmonLineReader:
    """Reads a *running* ``nvidia-smi dmon`` stream one complete line at a time (the streaming
    probe), with the same rules as :func:`parse_dmon` but no accumulation: memory stays constant
    however long the stream runs.

    :meth:`read` returns the row of a data line, ``None`` for a header, units, blank or warning
    line; raises :class:`DmonError` for an nvidia-smi error text (or pmon output), and
    ``ValueError`` for a line that is not a row under the current header (garbage, or a row
    before any header).
    """

    __slots__ = ("columns", "line_number")

    def __init__(self) -> None:
        self.columns: tuple[str, ...] | None = None
        self.line_number = 0

    def read(self, line: str) -> DmonRow | None:
        self.line_number += 1
        if not line.strip():
            return None
        if line.lstrip().startswith("#"):
            names = _header_columns(line, self.line_number)
            if names is not None:
                self.columns = names
            return None
        tokens = line.split()
        if self.columns is None or len(tokens) != len(self.columns):
            kind = classify_error_line(line)
            if kind is not None:
                raise DmonError(kind, line.strip()[:_MAX_MESSAGE])
            if _DEVICE_LIMIT_WARNING.search(line):
                return None
            raise ValueError(f"not a dmon row: {snippet(line)}")
        return _row(self.columns, tokens, self.line_number)


def _skip(
    state: _State, line: str, number: int, *, terminated: bool, reason: str | None = None
) -> None:
    if not terminated:
        state.notes.append(f"line {number}: dropped, cut off before its line end")
        # A cut line may still be a complete error text ("No devices were found" without "\n").
        if classify_error_line(line) is not None:
            state.stray.append(line)
        return
    state.stray.append(line)
    why = reason or "does not match the header"
    state.notes.append(f"line {number}: skipped ({why}): {snippet(line)}")
