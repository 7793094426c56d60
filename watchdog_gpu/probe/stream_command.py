"""The remote command of the streaming probe, and how its side output is read.

dmon's dated rows on stdout, batched on the host; an aux block (the burst command's output
without dmon, read by :func:`~watchdog_gpu.probe.command.split_probe_output`) on stderr; the
whole process group killed when the channel closes. Built only from validated integers.
``docs/probe.md``, "The streaming session".
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
    printed, the remote timeout of each aux query, and how many seconds of rows the host keeps
    before sending them (a healthy stream is silent for up to ``batch_seconds + 1`` seconds)."""

    interval_seconds: int = 1
    aux_interval_seconds: int = 60
    query_timeout_seconds: int = 15
    batch_seconds: int = 5

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("interval_seconds", self.interval_seconds, 1, 10),
            ("aux_interval_seconds", self.aux_interval_seconds, 5, 3600),
            ("query_timeout_seconds", self.query_timeout_seconds, 1, 120),
            ("batch_seconds", self.batch_seconds, 1, 30),
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
    # dmon's status is echoed by the left side of the pipe (a POSIX sh pipeline reports only
    # its last command's status), straight to stderr.
    dmon = (
        'L=; command -v stdbuf >/dev/null 2>&1 && L="stdbuf -oL"; '
        f"{{ TZ=UTC NVSMI_SHOW_ALL_DEVICES=1 $L nvidia-smi dmon -s u -d {spec.interval_seconds}"
        f" -o DT 2>&1; echo {DMON_EXIT_PREFIX}$?=== >&2; }} | {batch_loop(spec.batch_seconds)};"
        " kill 0"
    )
    # The aux block is collected and written at once: echoed line by line it was a dozen SSH
    # packets a minute per host, as many as the batched rows.
    body = (
        f"{{ {dmon}; }} & "
        f'{{ while :; do a=$({{ {aux}; }}); printf "%s\\n" "$a" >&2; '
        f"sleep {spec.aux_interval_seconds}; done; }} & "
        "cat >/dev/null; kill 0"
    )
    return f"sh -c '{body}'"


def batch_loop(batch_seconds: int) -> str:
    """The POSIX ``sh`` loop between dmon and the channel (``docs/probe.md``, "Rows in batches").

    ``k`` is the date/time of the newest dated row, ``n`` how many new seconds began since the
    last write, ``b`` the rows kept. A dated row is a line whose first two words are
    ``YYYYMMDD`` and ``HH:MM:SS`` (digits; anything else is written at once and judged by the
    reader). ``set -f``: a line's words are split, never globbed. A last line without a line
    end (dmon killed mid-row) is written without one, so the reader still sees it cut.
    """
    digit = "[0-9]"
    dated = f"{digit * 8}\\ {digit * 2}:{digit * 2}:{digit * 2}"
    return (
        '{ set -f; nl="\n"; k=; n=0; b=; '
        'while IFS= read -r l || { printf %s "$b$l"; exit 0; }; do '
        "set -- $l; "
        f'case "$1 $2" in {dated}) '
        'if [ -z "$k" ]; then printf "%s\\n" "$l"; k="$1 $2"; '
        'elif [ "$1 $2" != "$k" ]; then k="$1 $2"; n=$((n + 1)); '
        f'if [ "$n" -ge {batch_seconds} ]; then printf %s "$b"; b=; n=0; fi; b="$b$l$nl"; '
        'else b="$b$l$nl"; fi;; '
        '*) printf "%s\\n" "$b$l"; b=;; esac; done; }'
    )


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
