"""Requests, responses and routing shared by the dialect servers (no sockets here).

A dialect is a plain object whose ``handle(SimRequest) -> SimResponse`` speaks one provider's
API over the world; :mod:`watchdog_gpu.sim.servers.base` puts it behind a real HTTP server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One HTTP request, decoded. ``path`` has no query string and no trailing slash."""

    method: str
    path: str
    query: Mapping[str, Sequence[str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def query_value(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def json(self) -> Any:
        """The body as JSON (an empty body is ``{}``); raises ``ValueError`` when invalid."""
        if not self.body.strip():
            return {}
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class SimResponse:
    """What to send back. ``stall_seconds`` > 0 means: send nothing, wait, drop the line."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    stall_seconds: float = 0.0

    def with_header(self, name: str, value: str) -> SimResponse:
        return replace(self, headers=(*self.headers, (name, value)))

    def json(self) -> Any:
        return json.loads(self.body)


def json_response(
    status: int, payload: Any, *, content_type: str = "application/json"
) -> SimResponse:
    """A response whose body is ``payload`` as compact JSON."""
    return SimResponse(
        status=status,
        body=json.dumps(payload, separators=(",", ":")).encode(),
        content_type=content_type,
    )


def empty_response(status: int = 204) -> SimResponse:
    return SimResponse(status=status, body=b"", content_type="")


Handler = Callable[..., SimResponse]


@dataclass
class Router:
    """Method + path-pattern routing. Patterns use ``{name}`` for one path segment."""

    routes: list[tuple[str, re.Pattern[str], Handler]] = field(default_factory=list)

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern.rstrip("/")) + "$"
        self.routes.append((method, re.compile(regex), handler))

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]] | str | None:
        """``(handler, path parameters)``; ``"method"`` when the path exists with another
        method; None when no route matches."""
        path_matched = False
        for route_method, regex, handler in self.routes:
            found = regex.match(path)
            if found is None:
                continue
            path_matched = True
            if route_method == method:
                return handler, found.groupdict()
        return "method" if path_matched else None


def normalise_path(raw: str) -> str:
    """``/api/v0/instances/`` → ``/api/v0/instances``; collapses repeated slashes."""
    path = re.sub(r"/{2,}", "/", raw)
    return path.rstrip("/") or "/"
