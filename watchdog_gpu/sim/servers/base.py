"""The shared shape of a dialect, and the real HTTP server that puts one on loopback.

A :class:`Dialect` authenticates a request to an account (by the API key the scenario gave it),
applies the account's injected fault (:mod:`watchdog_gpu.sim.faults`), then routes it. The
:class:`SimHTTPServer` is a standard-library ``ThreadingHTTPServer``; it logs method, path (never
the query string, which may hold a legacy ``api_key``) and status, never a header or a body, and
keeps a :class:`RequestRecord` journal that tests read to check request shapes.
"""

from __future__ import annotations

import abc
import base64
import binascii
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from watchdog_gpu.sim import graphql
from watchdog_gpu.sim.faults import FaultSettings, apply_fault
from watchdog_gpu.sim.http import Router, SimRequest, SimResponse, normalise_path
from watchdog_gpu.sim.records import InvalidRequestError, SimError, UnknownInstanceError
from watchdog_gpu.sim.world import SimulatedWorld

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES = 1_000_000


class Dialect(abc.ABC):
    """One provider's API over the world. Subclasses register routes and error bodies."""

    provider: str

    def __init__(self, world: SimulatedWorld, faults: FaultSettings | None = None) -> None:
        self.world = world
        self.faults = faults or FaultSettings()
        self.router = Router()
        self.register_routes()

    @abc.abstractmethod
    def register_routes(self) -> None:
        """Add every route to ``self.router``."""

    @abc.abstractmethod
    def unauthorized(self, *, key_given: bool) -> SimResponse:
        """The answer to a missing (``key_given`` False) or unknown key."""

    @abc.abstractmethod
    def not_found(self, message: str) -> SimResponse: ...

    @abc.abstractmethod
    def bad_request(self, message: str) -> SimResponse: ...

    @abc.abstractmethod
    def server_error(self) -> SimResponse: ...

    @abc.abstractmethod
    def rate_limited(self, retry_after_seconds: int) -> SimResponse: ...

    def route_path(self, path: str) -> str:
        """The path the router sees (a dialect may strip an optional prefix)."""
        return path

    def api_key(self, request: SimRequest) -> str | None:
        """The key from ``Authorization: Bearer …`` or, as the real APIs still accept, the
        ``api_key`` query parameter."""
        header = request.header("authorization")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
            return None
        return request.query_value("api_key")

    def handle(self, request: SimRequest) -> SimResponse:
        """Authenticate, apply the account's fault, serve."""
        key = self.api_key(request)
        account = self.world.account_for_key(self.provider, key) if key else None
        if account is None:
            return self.unauthorized(key_given=key is not None)
        mode = self.world.api_mode(account)
        return apply_fault(mode, self, lambda: self.serve(account, request), self.faults)

    def serve(self, account: str, request: SimRequest) -> SimResponse:
        found = self.router.match(request.method, self.route_path(request.path))
        if found is None:
            return self.not_found(f"no such endpoint: {request.method} {request.path}")
        if found == "method":
            return self.bad_request(f"method {request.method} not allowed on {request.path}")
        assert not isinstance(found, str)
        handler, parameters = found
        try:
            return handler(account, request, **parameters)
        except UnknownInstanceError as error:
            return self.not_found(str(error))
        except (InvalidRequestError, ValueError) as error:
            return self.bad_request(str(error) or "invalid request")
        except SimError as error:
            return self.bad_request(str(error))


def basic_auth_key(header: str | None) -> str | None:
    """The key from ``Authorization: Basic …`` sent as ``key:`` (base64) or as the bare key."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        return None
    value = value.strip()
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return value
    user, colon, _password = decoded.partition(":")
    return user if colon else value


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What a server saw, without secrets: no header values, no query values, no bodies."""

    method: str
    path: str
    query_keys: tuple[str, ...]
    auth_scheme: str  # bearer | basic | query | none | other
    user_agent: str
    content_type: str
    status: int  # 0 when the server stalled and dropped the connection
    # A GraphQL request's operation type ("query" or "mutation"; "" for other requests or a
    # body that is no GraphQL document): what a read-only client asserts it never sends.
    operation: str = ""


class SimHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server serving one dialect on loopback."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, dialect: Dialect, host: str = "127.0.0.1", port: int = 0) -> None:
        self.dialect = dialect
        self.stopping = threading.Event()
        self.journal: list[RequestRecord] = []
        self.journal_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, entry: RequestRecord) -> None:
        with self.journal_lock:
            self.journal.append(entry)

    def requests(self) -> list[RequestRecord]:
        with self.journal_lock:
            return list(self.journal)


class _Handler(BaseHTTPRequestHandler):
    server: SimHTTPServer
    # One request per connection: simple, and a stalled request can never pin a kept-alive
    # connection open past shutdown.
    protocol_version = "HTTP/1.0"
    timeout = 15.0

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: object) -> None:
        # The default writes the request line (with its query string) to stderr: never do that.
        return

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, _MAX_BODY_BYTES)) if length > 0 else b""
        request = SimRequest(
            method=self.command,
            path=normalise_path(parts.path),
            query={key: tuple(values) for key, values in parse_qs(parts.query).items()},
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        try:
            response = self.server.dialect.handle(request)
        except Exception:
            logger.exception("sim request failed method=%s path=%s", request.method, request.path)
            response = self.server.dialect.server_error()
        self.server.record(_journal_entry(request, response))
        logger.debug(
            "sim request provider=%s method=%s path=%s status=%s",
            self.server.dialect.provider,
            request.method,
            request.path,
            response.status or "stalled",
        )
        if response.stall_seconds > 0:
            self.server.stopping.wait(response.stall_seconds)
            self.close_connection = True
            return
        self._send(response)

    def _send(self, response: SimResponse) -> None:
        self.send_response(response.status)
        if response.content_type:
            self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        if response.body and self.command != "HEAD":
            self.wfile.write(response.body)


def _journal_entry(request: SimRequest, response: SimResponse) -> RequestRecord:
    authorization = request.header("authorization") or ""
    scheme = authorization.partition(" ")[0].lower()
    if not authorization:
        scheme = "query" if "api_key" in request.query else "none"
    elif scheme not in ("bearer", "basic"):
        scheme = "other"
    return RequestRecord(
        method=request.method,
        path=request.path,
        query_keys=tuple(sorted(request.query)),
        auth_scheme=scheme,
        user_agent=request.header("user-agent") or "",
        content_type=request.header("content-type") or "",
        status=response.status,
        operation=_graphql_operation(request),
    )


def _graphql_operation(request: SimRequest) -> str:
    if request.method != "POST" or not request.path.endswith("/graphql"):
        return ""
    try:
        body = request.json()
    except ValueError:
        return ""
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str):
        return ""
    try:
        return graphql.parse(query).kind
    except graphql.GraphQLError:
        return ""


def serve_in_thread(server: SimHTTPServer) -> threading.Thread:
    """Start ``server.serve_forever`` in a named thread and return the thread."""
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"sim-{server.dialect.provider}",
        daemon=True,
    )
    thread.start()
    return thread


def stop_server(server: SimHTTPServer, thread: threading.Thread | None = None) -> None:
    """Stop serving, release stalled requests, close the socket, wait for handler threads."""
    server.stopping.set()
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=10)


DialectFactory = Callable[[SimulatedWorld, FaultSettings], Dialect]
