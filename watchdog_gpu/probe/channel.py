"""Reading one SSH exec channel to its end, within a local deadline.

paramiko's own timeouts apply per read, not per command, so a command that keeps the channel open
without finishing would never end; this loop enforces a deadline and closes the channel. The end of
a command is *both* the end of its output (EOF) and its exit status: OpenSSH may send the exit
status before the last of the output, and a reader that stops at the status loses lines.
"""

from __future__ import annotations

from typing import Literal

from watchdog_gpu.clock import Clock
from watchdog_gpu.probe.command import CommandResult
from watchdog_gpu.probe.paramiko_lean import paramiko

_POLL_SECONDS = 0.05


def read_channel(
    channel: paramiko.Channel, deadline_seconds: float, clock: Clock, max_output_bytes: int
) -> CommandResult:
    """Read ``channel`` (an exec session) until its output ended *and* the command exited (or
    the channel closed), ``deadline_seconds`` pass, or the output exceeds ``max_output_bytes``.
    Always closes the channel. Returns what was read; ``exit_status`` is ``None`` unless the
    server sent one and the read finished normally."""
    stdout, stderr = bytearray(), bytearray()
    end = clock.monotonic() + deadline_seconds
    channel.settimeout(_POLL_SECONDS)
    try:
        ending = _read_to_end(channel, stdout, stderr, max_output_bytes, clock=clock, end=end)
    finally:
        channel.close()
    timed_out, truncated = ending == "timed_out", ending == "truncated"
    # -1 is paramiko's "no exit-status message": killed session or dropped connection.
    status = None if timed_out or truncated or channel.exit_status < 0 else channel.exit_status
    return CommandResult(
        stdout=bytes(stdout[:max_output_bytes]).decode("utf-8", errors="replace"),
        stderr=bytes(stderr[:max_output_bytes]).decode("utf-8", errors="replace"),
        exit_status=status,
        timed_out=timed_out,
        output_truncated=truncated,
    )


def _read_to_end(
    channel: paramiko.Channel,
    stdout: bytearray,
    stderr: bytearray,
    max_output_bytes: int,
    *,
    clock: Clock,
    end: float,
) -> Literal["ended", "timed_out", "truncated"]:
    """Read the channel's output into ``stdout`` and ``stderr`` until the command ended, the
    clock's monotonic time reached ``end`` or the output grew too long: which of them."""
    while True:
        # Read the flags first: data that came before them is buffered by then.
        done = channel.closed or (channel.eof_received and channel.status_event.is_set())
        while channel.recv_ready():
            stdout += channel.recv(65536)
        while channel.recv_stderr_ready():
            stderr += channel.recv_stderr(65536)
        if len(stdout) + len(stderr) > max_output_bytes:
            return "truncated"
        if done:
            return "ended"
        if clock.monotonic() >= end:
            return "timed_out"
        _wait_for_more(channel, stdout)


def _wait_for_more(channel: paramiko.Channel, stdout: bytearray) -> None:
    """Wait up to a poll interval for the exit status (after EOF) or for more output."""
    if channel.eof_received:
        channel.status_event.wait(_POLL_SECONDS)  # only the exit status is missing
        return
    try:
        stdout += channel.recv(65536)  # waits up to _POLL_SECONDS for data or EOF
    except TimeoutError:
        return
