"""A tiny real HTTP receiver on 127.0.0.1 that records every request (for Apprise json:// and
webhook tests, dead-man's switch pings). Standard library only; one thread; answers every POST
and GET with ``status``."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    method: str
    path: str
    content_type: str
    body: bytes


def free_port() -> int:
    """A loopback port nothing listens on right now (connecting to it is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True  # come back up on the port a route already points at
    daemon_threads = True


class HttpReceiver:
    """``with HttpReceiver() as receiver:`` serves on ``receiver.port`` until the block ends.

    ``port=0`` picks a free port; pass a port to come back up where a route already points.
    ``status`` is the HTTP status every request gets (e.g. 500 to simulate a broken endpoint).
    """

    def __init__(self, port: int = 0, status: int = 200) -> None:
        self.status = status
        self.requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests.append(
                        ReceivedRequest(
                            "POST", self.path, self.headers.get("Content-Type", ""), body
                        )
                    )
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # e.g. a dead-man's switch ping
                with receiver._lock:
                    receiver.requests.append(
                        ReceivedRequest("GET", self.path, self.headers.get("Content-Type", ""), b"")
                    )
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep test output clean

        self._server = _Server(("127.0.0.1", port), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def received(self, path: str | None = None) -> list[ReceivedRequest]:
        """Requests so far (to ``path`` only, if given)."""
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def __enter__(self) -> HttpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
