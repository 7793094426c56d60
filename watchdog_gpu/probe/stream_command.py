"""The remote command of the streaming probe, and how its side output is read.

One long-lived session per host (``docs/probe.md``):

- **stdout** is ``nvidia-smi dmon -s u -d 1 -o DT`` running for as long as the session lives:
  one row per GPU per second, each with its own date and time (``-o DT``, under ``TZ=UTC``),
  passed through a small batching loop (below) so the rows cross the network a few seconds at a
  time instead of one SSH packet a second;
- **stderr** carries, every ``aux_interval_seconds`` (and once at the start), an *aux block*
  (collected, then written at once: one SSH packet, not one per line): the burst probe's output
  without its dmon part — the compute-apps CSV, ``nvidia-smi -L``, the
  remote clock and the last-input times of the pseudo-terminals — between the same markers, so
  :func:`~watchdog_gpu.probe.command.split_probe_output` and
  :func:`~watchdog_gpu.probe.command.interactive_login` read it unchanged;
- when dmon exits, a ``STREAM-DMON-EXIT`` marker with its status goes to stderr and the session
  ends.

**Batching.** dmon runs line-buffered (``stdbuf -oL`` where available) into a POSIX ``sh``
``read`` loop that keeps the rows and writes them out at once when a new second begins and
``batch_seconds`` seconds (distinct date/time values) have been kept since the last write. The
first data row and any line that is not a dated row (the header, an nvidia-smi error text, a row
of a dmon that ignores ``-o``) are written at once, so the first row and an error arrive
promptly; the rows of the last seconds are written when dmon ends. The loop is ``sh``, not
``awk``: mawk (the default awk of Debian and Ubuntu) reads a pipe in blocks until its buffer
fills, and its ``-W interactive`` also makes every write unbuffered. The reader stamps each row
with its own time (:mod:`~watchdog_gpu.probe.stream_reader`), not with when it arrived.

**Remote hygiene.** The shell's foreground job is ``cat >/dev/null``: it returns when the SSH
channel's stdin reaches EOF — the channel was closed, the connection dropped, or the daemon was
killed (the kernel closes its socket, sshd closes the session) — and the shell then kills its
whole process group (``kill 0``: dmon, the batching loop, the aux loop, a running query). sshd
starts every session in its own process group, so nothing of the probe outlives its channel on
the rented machine. The load on the host is one ``nvidia-smi dmon`` process (one row per GPU per
second), one ``sh`` batching its rows, and one short query a minute.

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
    """The POSIX ``sh`` loop between dmon and the channel (see the module docstring).

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
