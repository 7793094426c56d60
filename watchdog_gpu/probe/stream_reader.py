"""One host's stream text → rows, aux readings and what went wrong (pure; no I/O, no clock).

The stream manager and the simulator feed a :class:`StreamReader` the bytes they read with the
instant they read them; it cuts lines, parses them, judges each row at arrival and hands a read's
rows to the host's :class:`~watchdog_gpu.probe.stream_buffer.HostBuffer`, stamped with their own
host time (:mod:`~watchdog_gpu.probe.host_time`). It reports an nvidia-smi ``error``,
``garbage`` (including a line longer than :data:`MAX_LINE`) and ``dmon_exit`` for the manager to
reconnect on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import Verdict
from watchdog_gpu.probe import host_time
from watchdog_gpu.probe.command import ProbeSections, interactive_login
from watchdog_gpu.probe.compute_apps import COMPUTE_APPS_FIELDS, parse_compute_apps, parse_gpu_list
from watchdog_gpu.probe.dmon import DmonLineReader, DmonRow
from watchdog_gpu.probe.host_time import HostClockMap, host_seconds
from watchdog_gpu.probe.stream_buffer import AuxReading, HostBuffer
from watchdog_gpu.probe.stream_command import split_aux
from watchdog_gpu.probe.verdicts import check_threshold, processes_per_gpu, row_verdict

Metrics = tuple[float | None, float | None, float | None, float | None, float | None, float | None]
"""(sm, mem, enc, dec, jpg, ofa) of one parsed line, shared by every row that repeats it."""
Entry = tuple[int, Verdict, Metrics]
"""(GPU, verdict, metrics) of a judged line: what the buffer gets of each of its rows."""

MAX_LINE = 4096
_PARSED_LINES = 256  # distinct data lines remembered per session
_MAX_AUX = 256 * 1024  # an aux block is a few KiB; more without an end marker is garbage
_DATED = ("date", "time")


class _ParsedLine:
    """A data line read once: its row, GPU and metric values, and its verdict per process
    count on the GPU (the threshold is the reader's; judging a row was most of its cost). The
    row as the buffer takes it (``entry``) under the newest aux reading's process counts
    (``judged_under``, that mapping itself: a new reading is a new mapping) is kept apart:
    every row of a minute asks for it."""

    __slots__ = ("entry", "gpu", "judged_under", "metrics", "row", "verdicts")

    def __init__(self, row: DmonRow) -> None:
        self.row = row
        self.gpu = row.gpu
        self.metrics: Metrics = (
            row.metric("sm"),
            row.metric("mem"),
            row.metric("enc"),
            row.metric("dec"),
            row.metric("jpg"),
            row.metric("ofa"),
        )
        self.verdicts: dict[int | None, Verdict] = {}
        self.judged_under: object = _NOT_JUDGED
        self.entry: Entry = (self.gpu, Verdict.UNKNOWN, self.metrics)


_NOT_JUDGED = object()


class StreamReader:
    """Reads one session of one host (a new session gets a new reader)."""

    # Slots: a reader's fields sit in the object (1,000 readers are read in turn, each a dozen
    # times a minute: every field lookup of a dict-backed object missed the CPU caches more).
    __slots__ = (
        "_aux_text",
        "_dated",
        "_groups",
        "_host_clock",
        "_hosts",
        "_inert",
        "_last_row",
        "_lines",
        "_parsed",
        "_parsed_columns",
        "_pending",
        "_processes",
        "_processes_key",
        "_processes_of_key",
        "_recent",
        "_seen_gpus",
        "_threshold",
        "buffer",
        "dmon_exit",
        "error",
        "garbage",
        "rows",
    )

    def __init__(
        self, buffer: HostBuffer, *, threshold: float, interactive_recent_seconds: int
    ) -> None:
        self.buffer = buffer
        self._threshold = check_threshold(threshold)
        self._recent = interactive_recent_seconds
        self._lines = DmonLineReader()
        self._pending = ""
        # Each distinct data line under ``_parsed_columns`` (both caches start over when the
        # columns change), keyed by the line alone: hashing a (columns, line) key was a good part
        # of a streamed row's cost.
        self._parsed_columns: tuple[str, ...] | None = None
        self._parsed: dict[str, _ParsedLine] = {}
        # Under ``-o DT`` columns a data line is keyed without its date and time (which change
        # every second); the rows of one read wait for the read's offset, judged and grouped
        # by host time (every GPU of a host prints the same second: one instant a group):
        # ``_hosts`` holds each group's host time, ``_groups`` its rows.
        self._dated = False
        self._host_clock = HostClockMap()
        self._hosts: list[float | None] = []
        self._groups: list[list[Entry]] = []
        # Header and units lines that changed nothing under the current columns (a stream that
        # repeats its header, as the simulator's does every second, pays one read of each).
        self._inert: set[str] = set()
        self._aux_text = ""
        self._seen_gpus: set[int] = set()
        self._processes: Mapping[int, int] | None = None
        self._processes_key: tuple[str, str, tuple[int, ...]] | None = None
        self._processes_of_key: Mapping[int, int] | None = None
        self.rows = 0
        self.garbage = 0  # garbage lines since the last good row
        self.error: DmonError | None = None
        self.dmon_exit: int | None = None
        # The newest row's instant, the read that brought it and that read's instant in epoch
        # seconds: ``last_row_at`` is made of them when asked (a tick asks once, a host reads
        # a dozen times a minute).
        self._last_row: tuple[float, datetime, float] | None = None

    @property
    def last_row_at(self) -> datetime | None:
        """The newest row's instant (``None``: no row yet)."""
        if self._last_row is None:
            return None
        instant, at, read_at = self._last_row
        return at if instant == read_at else datetime.fromtimestamp(instant, UTC)

    def feed_stdout(self, text: str, at: datetime) -> None:
        """Text read from dmon's stdout at ``at`` (any piece: lines are cut here)."""
        # The complete lines of what was pending and ``text``; the rest waits for its end.
        if self._pending:
            text = self._pending + text
        carriage = "\r" in text
        if carriage:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE:
            pending = ""
            self.garbage += 1
        self._pending = pending
        if carriage:
            lines = [line.rstrip("\r") for line in lines]
        self._read(lines)
        if self._hosts:
            self._stamp(at)

    def _read(self, lines: list[str]) -> None:
        """Read complete lines: each row joins its read's rows of its host time."""
        remaining = iter(lines)
        while True:
            fast = self._dated and self._lines.columns is self._parsed_columns
            line = self._read_known_rows(remaining) if fast else next(remaining, None)
            if line is None:
                return
            # The slow path may change the columns, the caches and the counters.
            self._line(line)

    def _read_known_rows(self, remaining: Iterator[str]) -> str | None:
        """Read the dated rows of lines parsed before, at a date and time read before, from
        ``remaining``, up to the first other line, returned for the slow path (``_line``);
        ``None`` when the lines ran out."""
        # Every row of a steady stream is such a line: this loop is the reader's cost per row,
        # the largest part of a cycle's probe phase. The aux reading does not change during a
        # read: each row is judged as it arrives.
        parsed_lines, hosts, groups = self._parsed, self._hosts, self._groups
        processes = self._processes
        midnights, times_of_day = host_time.MIDNIGHTS, host_time.TIMES_OF_DAY
        last_date = last_time = ""
        entries: list[Entry] = []
        counted = 0  # rows read and not yet counted
        for line in remaining:
            parts = line.split(None, 2)
            if len(parts) != 3:
                self._count(counted)
                return line
            date, time, rest = parts
            parsed = parsed_lines.get(rest)
            if parsed is None:
                self._count(counted)
                return line
            if time != last_time or date != last_date:
                # host_seconds, its caches read here (a second of rows, every host): a date or
                # time not read before (or not one) is the slow path's, which reads it.
                midnight, of_day = midnights.get(date), times_of_day.get(time)
                if midnight is None or of_day is None:
                    self._count(counted)
                    return line
                last_date, last_time = date, time
                entries = []
                hosts.append(midnight + of_day)
                groups.append(entries)
            if parsed.judged_under is processes:
                entries.append(parsed.entry)
            else:
                entries.append(self._judge(parsed, processes))
            counted += 1
        self._count(counted)
        return None

    def _count(self, rows: int) -> None:
        """``rows`` good rows read in a row by the fast path (the line after them, if any, is
        the slow path's): as many lines read, and nothing went wrong since the last of them."""
        if not rows:
            return
        self._lines.line_number += rows
        self.rows += rows
        self.garbage = 0
        self.error = None

    def feed_stderr(self, text: str, at: datetime) -> None:
        """Text read from the session's stderr (aux blocks, dmon's exit marker) at ``at``."""
        blocks, self._aux_text, dmon_exit = split_aux(self._aux_text + text)
        if dmon_exit is not None:
            self.dmon_exit = dmon_exit
        if len(self._aux_text) > _MAX_AUX:
            self._aux_text = ""
            self.garbage += 1
        for block in blocks:
            if block.sections is not None:
                self._aux(block.sections, at)

    def _line(self, line: str) -> None:
        # A GPU's rows repeat (an idle GPU prints the same line every second): parse each
        # distinct data line once per header, and let its rows share one set of metric values
        # (a buffered row then costs its tuple and its instant: ``docs/probe.md``, memory).
        self._follow_columns()
        key, host = self._key(line)
        parsed = self._parsed.get(key) if host is not None or not self._dated else None
        if parsed is not None:
            self._lines.line_number += 1
            self._arrive(parsed, host)
        elif line in self._inert:  # a header or units line read before under these columns
            self._lines.line_number += 1
        else:
            self._parse(line, key, host)

    def _follow_columns(self) -> None:
        """Start both line caches over when the columns changed (a new header)."""
        columns = self._lines.columns
        if columns is self._parsed_columns:
            return
        if columns != self._parsed_columns:
            self._parsed.clear()
            self._inert.clear()
            self._dated = columns is not None and columns[:2] == _DATED
        self._parsed_columns = columns

    def _parse(self, line: str, key: str, host: float | None) -> None:
        """Read a line not read before under the current columns."""
        columns = self._lines.columns
        try:
            row = self._lines.read(line)
        except DmonError as error:
            # Kept without its traceback, which holds this frame and so the reader: a cycle
            # per session an nvidia-smi error ends, left to the cyclic collector.
            self.error = error.with_traceback(None)
            return
        except ValueError:
            self.garbage += 1
            return
        if row is None:
            if self._lines.columns == columns and line.lstrip().startswith("#"):
                self._remember_inert(line)
            return
        if self._dated and host is None:
            self.garbage += 1  # a row whose date or time is not one: its second is unknown
            return
        if len(self._parsed) >= _PARSED_LINES:
            self._parsed.clear()
        parsed = self._parsed[key] = _ParsedLine(row)
        self._seen_gpus.add(parsed.gpu)  # every parsed line arrives as a row, now
        self._arrive(parsed, host)

    def _remember_inert(self, line: str) -> None:
        """A header or units line that left the columns as they were: reading it again
        changes nothing."""
        if len(self._inert) >= _PARSED_LINES:
            self._inert.clear()
        self._inert.add(line)

    def _key(self, line: str) -> tuple[str, float | None]:
        """A line's cache key and its host time: under ``-o DT`` columns a row's text after
        its date and time (``None``: they are not a date and a time), else the line itself."""
        if self._dated:
            parts = line.split(None, 2)
            if len(parts) == 3:
                return parts[2], host_seconds(parts[0], parts[1])
        return line, None

    def _arrive(self, parsed: _ParsedLine, host: float | None) -> None:
        self._hosts.append(host)
        self._groups.append([self._judge(parsed, self._processes)])
        self.rows += 1
        self.garbage = 0
        self.error = None

    def _stamp(self, at: datetime) -> None:
        """Add the rows of the read at ``at``, each at its host time mapped to our clock (or at
        ``at`` without date/time columns): one instant per group of rows with one host time."""
        hosts, groups = self._hosts, self._groups
        read_at = at.timestamp()
        try:
            instants = self._host_clock.read(hosts, read_at)
            self.buffer.add_grouped(zip(instants, groups, strict=True))
        finally:
            hosts.clear()  # the lists serve the next read
            groups.clear()
        self._last_row = (instants[-1], at, read_at)

    def _judge(self, parsed: _ParsedLine, processes: Mapping[int, int] | None) -> Entry:
        """A line's row as the buffer takes it, judged under ``processes`` (kept on the line
        for the rows after it)."""
        entry = parsed.entry = (parsed.gpu, self._verdict(parsed, processes), parsed.metrics)
        parsed.judged_under = processes
        return entry

    def _count_processes(self, sections: ProbeSections) -> Mapping[int, int] | None:
        """Compute processes per GPU index from an aux block's lists (``None``: not known)."""
        try:
            gpu_ids: Mapping[str, int] | None = parse_gpu_list(sections.gpus_text)
        except DmonError:
            gpu_ids = None
        try:
            apps = parse_compute_apps(sections.apps_text, COMPUTE_APPS_FIELDS)
        except DmonError:
            apps = None
        indices = sorted(self._seen_gpus | set((gpu_ids or {}).values()))
        return processes_per_gpu(apps, indices, gpu_ids) if indices else None

    def _verdict(self, parsed: _ParsedLine, processes: Mapping[int, int] | None) -> Verdict:
        count = None if processes is None else processes.get(parsed.gpu, 0)
        verdict = parsed.verdicts.get(count)
        if verdict is None:
            verdict = parsed.verdicts[count] = row_verdict(
                parsed.row, threshold=self._threshold, processes=count
            )
        return verdict

    def _aux(self, sections: ProbeSections, at: datetime) -> None:
        processes: Mapping[int, int] | None = None
        if sections.apps_exit == 0:
            # A steady host lists the same processes every minute: the same texts under the
            # same GPUs give the same mapping object, and the rows' verdicts under it still hold.
            key = (sections.apps_text, sections.gpus_text, tuple(sorted(self._seen_gpus)))
            if key == self._processes_key:
                processes = self._processes_of_key
            else:
                processes = self._processes_of_key = self._count_processes(sections)
                self._processes_key = key
        self._processes = processes
        self.buffer.add_aux(
            AuxReading(
                at=at,
                processes=processes,
                interactive_login=interactive_login(sections, self._recent),
            )
        )
