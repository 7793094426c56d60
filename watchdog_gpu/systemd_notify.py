"""sd_notify in pure Python: tell systemd we are ready, alive, what we do, and that we stop.

The protocol (``sd_notify(3)``) is one datagram of newline-separated ``KEY=value`` fields sent to
the AF_UNIX socket named by ``$NOTIFY_SOCKET``; a leading ``@`` names a Linux abstract socket.
systemd documents it as a stable interface and recommends re-implementing it instead of linking
libsystemd (the man page carries a reference implementation); the ``sdnotify`` package is
unmaintained and swallows every error, so we do not use it.

Every function returns False (and does nothing) when the process does not run under systemd
with ``Type=notify``, so the daemon calls them unconditionally. A send that fails is logged and
reported as False, never raised: systemd's watchdog will notice if we really stopped talking.

The daemon should send ``READY=1`` after config, migrations and the metrics server are up,
``WATCHDOG=1`` every :func:`watchdog_interval` seconds **only after checking that the poll jobs
made progress** (so a hung job gets the service restarted), ``STATUS=`` with a human line, and
``STOPPING=1`` on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

logger = logging.getLogger(__name__)

_warned_unsupported: set[str] = set()


def notify_socket_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The socket address from ``$NOTIFY_SOCKET`` (abstract ``@name`` → ``\\0name``), or None
    when unset or of a kind we do not speak (e.g. ``vsock:`` from newer systemd)."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return None
    if address[0] == "@":
        return "\0" + address[1:]
    if address[0] == "/":
        return address
    if address not in _warned_unsupported:
        _warned_unsupported.add(address)
        logger.warning("NOTIFY_SOCKET kind not supported, sd_notify disabled address=%s", address)
    return None


def notify(*fields: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=polling"``) as one datagram.

    Returns True when sent, False when not under systemd or the send failed (logged).
    Raises ValueError for a field without ``=`` or containing a newline (it would forge
    another field).
    """
    for field in fields:
        if "=" not in field or "\n" in field:
            raise ValueError(f"not a single KEY=value sd_notify field: {field!r}")
    address = notify_socket_address(environ)
    if address is None or not fields:
        return False
    payload = "\n".join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(payload)
    except OSError as error:
        logger.warning("sd_notify failed error=%s", type(error).__name__)
        return False
    return True


def ready(status: str | None = None, *, environ: Mapping[str, str] | None = None) -> bool:
    """``READY=1`` (and a status line): start-up is complete."""
    fields = ["READY=1"] if status is None else ["READY=1", _status_field(status)]
    return notify(*fields, environ=environ)


def status(text: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """``STATUS=text``: the line ``systemctl status`` shows."""
    return notify(_status_field(text), environ=environ)


def watchdog_ping(*, environ: Mapping[str, str] | None = None) -> bool:
    """``WATCHDOG=1``: we are alive and making progress."""
    return notify("WATCHDOG=1", environ=environ)


def stopping(status: str | None = None, *, environ: Mapping[str, str] | None = None) -> bool:
    """``STOPPING=1``: shutdown has begun."""
    fields = ["STOPPING=1"] if status is None else ["STOPPING=1", _status_field(status)]
    return notify(*fields, environ=environ)


def extend_timeout(seconds: float, *, environ: Mapping[str, str] | None = None) -> bool:
    """``EXTEND_TIMEOUT_USEC=``: ask for ``seconds`` more before systemd gives up on start/stop
    (e.g. while a long migration runs)."""
    return notify(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}", environ=environ)


def watchdog_interval(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WatchdogSec``, per
    ``sd_watchdog_enabled(3)``), or None when the watchdog is off or meant for another process
    (``$WATCHDOG_PID`` set to a different pid). Malformed values count as off."""
    env = os.environ if environ is None else environ
    usec_text, pid_text = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    try:
        usec = int(usec_text)
        target_pid = int(pid_text) if pid_text else None
    except ValueError:
        return None
    if usec <= 0:
        return None
    if target_pid is not None and target_pid != (os.getpid() if pid is None else pid):
        return None
    return usec / 1_000_000 / 2


def _status_field(text: str) -> str:
    # A newline would end the field and let the text forge others (e.g. "READY=1").
    return "STATUS=" + " ".join(text.split())
