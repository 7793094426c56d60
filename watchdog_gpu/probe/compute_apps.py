"""Parse ``nvidia-smi --query-compute-apps=… --format=csv[,noheader][,nounits]`` and ``-L``.

On a MIG-enabled GPU dmon prints ``-`` for every utilisation, so the list of compute processes is
the only usable busy signal there. Pure: no I/O.

Format facts, as the driver prints them:

- With a header: ``pid, process_name, used_gpu_memory [MiB]``; requested aliases are printed under
  their canonical names (``name`` → ``process_name``, ``used_memory`` → ``used_gpu_memory``).
- No processes: the header line alone, or nothing at all with ``noheader``.
- Values are joined by ``", "``; memory is ``1836 MiB`` or, with ``nounits``, ``1836``; ``[N/A]``
  (Windows WDDM), ``N/A``, ``[Not Supported]`` or an empty value mean "unknown".
- Process names may contain spaces, ``::`` and in principle commas: fields left of the name are
  split from the left, fields right of it from the right.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.dmon import classify_error_line, snippet

# The query the SSH prober runs (``--query-compute-apps=gpu_uuid,pid,process_name,used_memory``
# with ``--format=csv,noheader,nounits``); pass it as ``fields`` since that output has no header.
COMPUTE_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")

_CANONICAL = {"name": "process_name", "used_memory": "used_gpu_memory"}
_KNOWN_FIELDS = frozenset(
    {
        "timestamp",
        "gpu_name",
        "gpu_bus_id",
        "gpu_serial",
        "gpu_uuid",
        "pid",
        "process_name",
        "used_gpu_memory",
    }
)
_UNAVAILABLE = frozenset({"", "n/a", "[n/a]", "[not supported]", "[unknown error]"})
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]$")
_MEMORY = re.compile(r"([0-9]+)(?:\s*MiB)?", re.IGNORECASE)
_GPU_LINE = re.compile(r"^GPU ([0-9]+):.*\(UUID: ([^)\s]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: ([^)\s]+)\)")


@dataclass(frozen=True, slots=True)
class ComputeApp:
    """One compute process on one GPU; every field ``None`` when not queried or not available."""

    pid: int | None
    process_name: str | None
    used_memory_mib: int | None
    gpu_uuid: str | None = None
    gpu_bus_id: str | None = None


def canonical_field(name: str) -> str:
    """The canonical name nvidia-smi prints for a query field (units dropped, aliases resolved)."""
    bare = _UNIT_SUFFIX.sub("", name.strip()).lower()
    return _CANONICAL.get(bare, bare)


def parse_compute_apps(text: str, fields: Sequence[str] | None = None) -> tuple[ComputeApp, ...]:
    """Parse the CSV output of ``--query-compute-apps``.

    Given the output and, for ``noheader`` output, the queried ``fields`` in order (a header line,
    when present, wins), return the processes; an empty tuple when there are none (header only or
    empty output). Raise ``DmonError`` with the error's kind for an nvidia-smi error text, or
    ``unparseable`` for a line that does not fit the fields or output without header or fields.
    """
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    columns, rows = _columns(lines, fields)
    if columns is None:
        return ()
    unknown = [name for name in columns if name not in _KNOWN_FIELDS]
    if unknown:
        raise DmonError("unparseable", f"unknown compute-apps fields: {', '.join(unknown)}")
    return tuple(_parse_line(line, columns) for line in rows)


def _columns(
    lines: list[str], fields: Sequence[str] | None
) -> tuple[tuple[str, ...] | None, list[str]]:
    """The columns of compute-apps output (its header's, else the queried ``fields``') and its
    data lines; ``None`` for empty output without fields. Raise ``DmonError`` for an error text
    or other output without header or fields."""
    if lines and _is_header(lines[0]):
        return tuple(canonical_field(name) for name in lines[0].split(",")), lines[1:]
    if fields is not None:
        return tuple(canonical_field(name) for name in fields), lines
    if not lines:
        return None, lines
    kind = classify_error_line(lines[0])
    if kind is not None:
        raise DmonError(kind, lines[0].strip())
    raise DmonError("unparseable", "compute-apps output without header: fields unknown")


def _is_header(line: str) -> bool:
    names = [canonical_field(name) for name in line.split(",")]
    return all(name in _KNOWN_FIELDS for name in names)


def _parse_line(line: str, columns: tuple[str, ...]) -> ComputeApp:
    values = _split(line, columns)
    try:
        if values is None:
            raise ValueError("wrong number of values")
        app = ComputeApp(
            pid=_optional_int(values.get("pid")),
            process_name=_optional_text(values.get("process_name")),
            used_memory_mib=_memory(values.get("used_gpu_memory")),
            gpu_uuid=_optional_text(values.get("gpu_uuid")),
            gpu_bus_id=_optional_text(values.get("gpu_bus_id")),
        )
        # An error text that happens to split into the right number of values has no pid.
        if app.pid is None and classify_error_line(line) is not None:
            raise ValueError("an error text, not a process")
    except ValueError as error:
        kind = classify_error_line(line)
        if kind is not None:
            raise DmonError(kind, line.strip()) from None
        raise DmonError("unparseable", f"compute-apps line {snippet(line)}: {error}") from None
    return app


def _split(line: str, columns: tuple[str, ...]) -> dict[str, str] | None:
    """Values by column; the process name keeps any commas inside it."""
    if "process_name" not in columns:
        parts = line.split(",")
    else:
        before = columns.index("process_name")
        after = len(columns) - before - 1
        head = line.split(",", before)
        if len(head) != before + 1:
            return None
        tail = head[-1].rsplit(",", after)
        parts = [*head[:-1], *tail]
    if len(parts) != len(columns):
        return None
    return {name: part.strip() for name, part in zip(columns, parts, strict=True)}


def _optional_text(value: str | None) -> str | None:
    if value is None or value.lower() in _UNAVAILABLE:
        return None
    return value


def _optional_int(value: str | None) -> int | None:
    text = _optional_text(value)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"not a process id: {snippet(text)}")
    return int(text)


def _memory(value: str | None) -> int | None:
    text = _optional_text(value)
    if text is None:
        return None
    match = _MEMORY.fullmatch(text)
    if match is None:
        raise ValueError(f"not a memory amount: {snippet(text)}")
    return int(match.group(1))


def parse_gpu_list(text: str) -> Mapping[str, int]:
    """Parse ``nvidia-smi -L``: map every GPU UUID, and the UUID of every MIG device listed under
    a GPU, to that GPU's index. Raise ``DmonError`` for an error text or output without GPUs."""
    mapping: dict[str, int] = {}
    current: int | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if gpu := _GPU_LINE.match(line):
            current = int(gpu.group(1))
            mapping[gpu.group(2)] = current
        elif (mig := _MIG_LINE.match(line)) and current is not None:
            mapping[mig.group(1)] = current
        elif line.strip() and (kind := classify_error_line(line)) is not None:
            raise DmonError(kind, line.strip())
    if not mapping:
        raise DmonError("unparseable", "no GPU line in nvidia-smi -L output")
    return mapping
