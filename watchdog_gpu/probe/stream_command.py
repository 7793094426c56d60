"""The remote command of the streaming probe, and how its side output is read.

One long-lived session per host (``docs/probe.md``):

- **stdout** is ``nvidia-smi dmon -s u -d 1`` running for as long as the session lives: one row
  per GPU per second, read line by line as it comes (``stdbuf -oL`` where available, so the
  rows are not held in a pipe buffer);
- **stderr** carries, every ``aux_interval_seconds`` (and once at the start), an *aux block*: the
  burst probe's output without its dmon part — the compute-apps CSV, ``nvidia-smi -L``, the
  remote clock and the last-input times of the pseudo-terminals — between the same markers, so
  :func:`~watchdog_gpu.probe.command.split_probe_output` and
  :func:`~watchdog_gpu.probe.command.interactive_login` read it unchanged;
- when dmon exits, a ``STREAM-DMON-EXIT`` marker with its status goes to stderr and the session
  ends.

**Remote hygiene.** The shell's foreground job is ``cat >/dev/null``: it returns when the SSH
channel's stdin reaches EOF — the channel was closed, the connection dropped, or the daemon was
killed (the kernel closes its socket, sshd closes the session) — and the shell then kills its
whole process group (``kill 0``: dmon, the aux loop, a running query). sshd starts every session
in its own process group, so nothing of the probe outlives its channel on the rented machine.
The load on the host is one ``nvidia-smi dmon`` process (one row per GPU per second) plus one
short query a minute.

Like the burst command, the text is built only from validated integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog_gpu.probe.command import (
    BEGIN_MARKER,
    END_MARKER,
    GPUS_MARKER,
    ProbeSections,
    exit_marker,
    split_probe_output,
)
from watchdog_gpu.probe.compute_apps import COMPUTE_APPS_FIELDS

DMON_EXIT_PREFIX = "===WATCHDOG-GPU:STREAM-DMON-EXIT:"
_MARKER_TAIL = len(DMON_EXIT_PREFIX) + 8


@dataclass(frozen=True, slots=True)
class StreamCommandSpec:
    """The numbers of the streaming command: dmon's interval, how often the aux block is
    printed, and the remote timeout of each aux query."""

    interval_seconds: int = 1
    aux_interval_seconds: int = 60
    query_timeout_seconds: int = 15

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("interval_seconds", self.interval_seconds, 1, 10),
            ("aux_interval_seconds", self.aux_interval_seconds, 5, 3600),
            ("query_timeout_seconds", self.query_timeout_seconds, 1, 120),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")


def build_stream_command(spec: StreamCommandSpec) -> str:
    """The exact command text for ``spec`` (no single quotes inside the ``sh -c '…'`` body)."""
    timeout = f"timeout {spec.query_timeout_seconds}"
    aux = "; ".join(
        (
            f"echo {BEGIN_MARKER}",
            f"echo {exit_marker('DMON', 0)}",
            f"{timeout} nvidia-smi --query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}"
            " --format=csv,noheader,nounits 2>&1",
            f"echo {exit_marker('APPS', 0).replace(':0=', ':$?=')}",
            f"{timeout} nvidia-smi -L 2>/dev/null",
            f"echo {GPUS_MARKER}",
            "date +%s",
            "stat -c %X /dev/pts/[0-9]* 2>/dev/null",
            f"echo {END_MARKER}",
        )
    )
    dmon = (
        'L=; command -v stdbuf >/dev/null 2>&1 && L="stdbuf -oL"; '
        f"NVSMI_SHOW_ALL_DEVICES=1 $L nvidia-smi dmon -s u -d {spec.interval_seconds} 2>&1; "
        f"echo {DMON_EXIT_PREFIX}$?=== >&2; kill 0"
    )
    body = (
        f"{{ {dmon}; }} & "
        f"{{ while :; do {{ {aux}; }} >&2; sleep {spec.aux_interval_seconds}; done; }} & "
        "cat >/dev/null; kill 0"
    )
    return f"sh -c '{body}'"


@dataclass(frozen=True, slots=True)
class AuxBlock:
    """One aux block cut from the stderr text: its sections (``None``: unreadable)."""

    sections: ProbeSections | None


def split_aux(buffer: str) -> tuple[list[AuxBlock], str, int | None]:
    """Cut complete aux blocks out of accumulated stderr text.

    Returns the blocks, the text left over (an incomplete block or marker, kept for the next
    read; other text before a begin marker is dropped) and dmon's exit status if its marker
    arrived.
    """
    blocks: list[AuxBlock] = []
    dmon_exit: int | None = None
    marker_at = buffer.find(DMON_EXIT_PREFIX)
    if marker_at >= 0 and "\n" in buffer[marker_at:]:
        digits = buffer[marker_at + len(DMON_EXIT_PREFIX) :].split("=", 1)[0]
        if digits.isascii() and digits.isdigit():
            dmon_exit = int(digits)
        buffer = buffer[:marker_at] + buffer[marker_at:].partition("\n")[2]
    while True:
        start = buffer.find(BEGIN_MARKER)
        if start < 0:
            # Keep a tail that may be the start of a marker cut between two reads.
            return blocks, buffer[-_MARKER_TAIL:] if "=" in buffer else "", dmon_exit
        end = buffer.find(END_MARKER, start)
        if end < 0:
            return blocks, buffer[start:], dmon_exit
        text = buffer[start : end + len(END_MARKER)] + "\n"
        blocks.append(AuxBlock(split_probe_output(text)))
        buffer = buffer[end + len(END_MARKER) :]
