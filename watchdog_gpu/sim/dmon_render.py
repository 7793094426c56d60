"""Fake ``nvidia-smi`` output for simulated GPUs, shaped like the real tool's captures
(``tests/fixtures/nvidia-smi/``).

The fake SSH runner feeds this text to the real parser, so the probe code path in scenario tests
and the demo is the one that runs against real hosts:

- :func:`render_dmon` — ``nvidia-smi dmon -s u`` text: two ``#`` header lines (names, units),
  then one row per GPU per sampling cycle, GPUs in ascending index order. The default layout is
  the ≥ R530 one (columns ``sm mem enc dec jpg ofa``, every field 7 wide after the index column,
  every line ending in a space); ``legacy=True`` gives the ≤ R470 layout (``sm mem enc dec``,
  width 6, no trailing space); ``date_time`` prepends the ``-o DT`` columns. On a MIG GPU every
  utilisation is ``-``. :func:`render_dmon_header` and :func:`render_dmon_rows` are its two
  parts, for the simulator's live stream.
- :func:`render_compute_apps` — ``--query-compute-apps=… --format=csv[,noheader][,nounits]``;
- :func:`render_gpu_list` — ``nvidia-smi -L`` (MIG devices indented under their GPU), with the
  same GPU UUIDs as the compute-apps rows so processes can be placed on their GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from watchdog_gpu.sim.gpu import GpuProcess, GpuState

UTILISATION_COLUMNS = ("sm", "mem", "enc", "dec", "jpg", "ofa")
LEGACY_COLUMNS = ("sm", "mem", "enc", "dec")

# Canonical compute-apps field names and their aliases (nvidia-smi prints the canonical one).
_APP_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}
_APP_UNITS = {"used_gpu_memory": " [MiB]"}


def render_dmon(
    frames: Sequence[GpuState],
    *,
    legacy: bool = False,
    date_time: Sequence[datetime] | None = None,
) -> str:
    """``nvidia-smi dmon -s u`` output for successive samples (one :class:`GpuState` each).

    ``date_time`` gives each frame's instant for the ``-o DT`` layout. Frames with no GPU (the
    instance was not running) print no rows, as if the sample was lost.
    """
    if date_time is not None and len(date_time) != len(frames):
        raise ValueError("one instant per frame is needed for the date/time columns")
    text = [render_dmon_header(legacy=legacy, dated=date_time is not None)]
    for number, frame in enumerate(frames):
        stamp = None if date_time is None else dmon_stamp(date_time[number])
        text.append(render_dmon_rows(frame, stamp, legacy=legacy))
    return "".join(text)


def render_dmon_header(*, legacy: bool = False, dated: bool = False) -> str:
    """dmon's two ``#`` header lines (names, units); ``dated``: with the ``-o DT`` columns."""
    columns = LEGACY_COLUMNS if legacy else UTILISATION_COLUMNS
    width = 6 if legacy else 7
    tail = "" if legacy else " "
    if dated:
        # "#Date       Time        gpu": the '#' is glued to the first token.
        names = f"{'#Date':<12}{'Time':<12}{'gpu':>3}"
        units = f"{'#YYYYMMDD':<12}{'HH:MM:SS':<12}{'Idx':>3}"
    else:
        names, units = "# gpu", "# Idx"
    return (
        names
        + "".join(f"{column:>{width}}" for column in columns)
        + tail
        + "\n"
        + units
        + "".join(f"{'%':>{width}}" for _ in columns)
        + tail
        + "\n"
    )


def dmon_stamp(instant: datetime) -> str:
    """The ``-o DT`` columns of a row sampled at ``instant``, in UTC (the streaming command
    runs dmon under ``TZ=UTC``)."""
    instant = instant.astimezone(UTC)
    return f" {instant:%Y%m%d}   {instant:%H:%M:%S}"


def render_dmon_rows(frame: GpuState, stamp: str | None = None, *, legacy: bool = False) -> str:
    """The rows of one sample (a line per GPU), led by ``stamp`` (:func:`dmon_stamp`) in the
    ``-o DT`` layout."""
    columns = LEGACY_COLUMNS if legacy else UTILISATION_COLUMNS
    width = 6 if legacy else 7
    tail = "" if legacy else " "
    lines = []
    for reading in frame.gpus:
        values = {
            "sm": reading.sm,
            "mem": reading.mem,
            "enc": reading.enc,
            "dec": reading.dec,
            "jpg": 0,
            "ofa": 0,
        }
        fields = ["-" if frame.mig else str(values[column]) for column in columns]
        prefix = f"{reading.index:>5}" if stamp is None else f"{stamp}{reading.index:>7}"
        lines.append(prefix + "".join(f"{field:>{width}}" for field in fields) + tail + "\n")
    return "".join(lines)


def render_compute_apps(
    state: GpuState,
    fields: Sequence[str] = ("pid", "process_name", "used_gpu_memory"),
    *,
    header: bool = True,
    units: bool = True,
    at: datetime | None = None,
    gpu_name: str = "NVIDIA Simulated GPU",
) -> str:
    """``nvidia-smi --query-compute-apps=<fields> --format=csv[,noheader][,nounits]`` output.

    Known fields: ``timestamp``, ``gpu_name``, ``gpu_bus_id``, ``gpu_serial``, ``gpu_uuid``,
    ``pid``, ``process_name`` (alias ``name``), ``used_gpu_memory`` (alias ``used_memory``).
    No processes → the header line alone (or nothing with ``header=False``).
    """
    canonical = _app_fields(fields)
    lines = []
    if header:
        lines.append(", ".join(field + _APP_UNITS.get(field, "") for field in canonical))
    stamp = (at or datetime(2026, 1, 1, tzinfo=UTC)).astimezone(UTC)
    for process in state.processes:
        values = _app_values(process, stamp, gpu_name, units=units)
        lines.append(", ".join(values[field] for field in canonical))
    return "".join(line + "\n" for line in lines)


def _app_fields(fields: Sequence[str]) -> list[str]:
    """``fields`` under their canonical names; ``ValueError`` names any unknown one."""
    canonical = [_APP_ALIASES.get(field, field) for field in fields]
    unknown = [field for field in canonical if field not in _APP_FIELDS]
    if unknown:
        raise ValueError(f"not a compute-apps field: {', '.join(unknown)}")
    return canonical


def _app_values(
    process: GpuProcess, stamp: datetime, gpu_name: str, *, units: bool
) -> dict[str, str]:
    """Every compute-apps field of ``process``, as text."""
    memory = f"{process.used_mib} MiB" if units else str(process.used_mib)
    return {
        "timestamp": stamp.strftime("%Y/%m/%d %H:%M:%S.") + f"{stamp.microsecond // 1000:03d}",
        "gpu_name": gpu_name,
        "gpu_bus_id": f"00000000:{process.gpu_index + 1:02X}:00.0",
        "gpu_serial": "0000000000000",
        "gpu_uuid": gpu_uuid(process.gpu_index),
        "pid": str(process.pid),
        "process_name": process.name,
        "used_gpu_memory": memory,
    }


_APP_FIELDS = frozenset(
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


def gpu_uuid(index: int) -> str:
    """The (fake, stable) UUID of GPU ``index``, as ``-L`` and the compute-apps query print it."""
    return f"GPU-00000000-0000-4000-8000-{index:012x}"


def render_gpu_list(state: GpuState, gpu_name: str = "NVIDIA Simulated GPU") -> str:
    """``nvidia-smi -L`` output: ``GPU 0: <name> (UUID: GPU-…)``; on MIG GPUs one MIG device
    line is indented under each GPU, as the real tool prints them."""
    lines = []
    for reading in state.gpus:
        lines.append(f"GPU {reading.index}: {gpu_name} (UUID: {gpu_uuid(reading.index)})")
        if state.mig:
            lines.append(
                f"  MIG 3g.40gb     Device  0: (UUID: MIG-00000000-0000-4000-8000-"
                f"{reading.index:012x})"
            )
    return "".join(line + "\n" for line in lines)
