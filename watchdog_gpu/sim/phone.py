"""The demo's "phone": a tiny HTTP receiver on loopback for Apprise's ``json://`` messages.

The daemon delivers notifications through Apprise exactly as it would to a phone; pointing a
route at ``json://127.0.0.1:PORT/phone`` makes Apprise POST each message as JSON
(``{"version": "1.0", "title": …, "message": …, "attachments": [], "type": "warning"}``) to
this receiver, which records it with the clock's time of arrival (the virtual time of the demo's
night). Standard library only; it binds 127.0.0.1 and answers every POST with 200.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from watchdog_gpu.clock import Clock

log = logging.getLogger(__name__)

PATH = "/phone"
_MAX_BODY_BYTES = 1_000_000
# Apprise's message types, back to the watchdog's severities (delivery maps critical to failure).
_SEVERITIES = {"info": "info", "success": "info", "warning": "warning", "failure": "critical"}


@dataclass(frozen=True, slots=True)
class PhoneMessage:
    """One message as the phone received it."""

    received_at: datetime
    severity: str  # info, warning or critical
    title: str
    body: str


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class Phone:
    """``Phone(clock)`` listens on a free loopback port once :meth:`start` ran; :attr:`url` is
    the Apprise URL that reaches it; :meth:`messages` lists what arrived, oldest first."""

    def __init__(self, clock: Clock, host: str = "127.0.0.1") -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._messages: list[PhoneMessage] = []
        self._server = _Server((host, 0), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        """The Apprise URL of this phone (no secret in it)."""
        return f"json://127.0.0.1:{self.port}{PATH}"

    def start(self) -> Phone:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="demo-phone", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Phone:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def messages(self) -> list[PhoneMessage]:
        with self._lock:
            return list(self._messages)

    def receive(self, payload: bytes) -> PhoneMessage | None:
        """Record one Apprise JSON payload; None (and nothing recorded) when it is not one."""
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("title"), str):
            return None
        message = PhoneMessage(
            received_at=self._clock.now(),
            severity=_SEVERITIES.get(str(data.get("type", "")), "info"),
            title=data["title"],
            body=str(data.get("message", "")),
        )
        with self._lock:
            self._messages.append(message)
        return message

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        phone = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != PATH or not 0 < length <= _MAX_BODY_BYTES:
                    self._answer(404 if self.path != PATH else 400)
                    return
                received = phone.receive(self.rfile.read(length))
                self._answer(200 if received is not None else 400)

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass  # the demo prints the messages itself

        return Handler
