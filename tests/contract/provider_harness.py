"""A fake provider API for contract tests: recorded fixture bodies served through
``httpx.MockTransport``, with the key discipline checked on every single request."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx

from watchdog_gpu.providers import DEFAULT_API_URLS, PROVIDERS, BaseProvider
from watchdog_gpu.providers.http import stoppable_sleep

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"
CANARY_KEY = "canary-key-5c1d9e"
NOW = datetime(2025, 12, 2, 18, 0, tzinfo=UTC)

P = TypeVar("P", bound=BaseProvider)

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response] | Exception


def fixture_text(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def fixture_json(relative: str) -> object:
    return json.loads(fixture_text(relative))


def respond(
    status: int = 200,
    body: str | object | None = None,
    *,
    fixture: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """A response with a fixture's bytes, a JSON value, or raw text as its body."""
    if fixture is not None:
        content = fixture_text(fixture)
        kind = "application/json" if fixture.endswith(".json") else "text/plain"
    elif isinstance(body, str):
        content, kind = body, "text/html" if body.lstrip().startswith("<") else "text/plain"
    elif body is None:
        content, kind = "", "application/json"
    else:
        content, kind = json.dumps(body), "application/json"
    return httpx.Response(
        status, content=content.encode(), headers={"Content-Type": kind, **(headers or {})}
    )


@dataclass
class Route:
    method: str
    path: str
    body_contains: str | None
    answers: list[Answer]


@dataclass
class FakeApi:
    """Routes (method, path[, text the body must contain]) to queued answers; the last answer
    of a route repeats. Every request is recorded and must carry the key only in the
    ``Authorization`` header, with a timeout set."""

    api_key: str = CANARY_KEY
    routes: list[Route] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def add(
        self, method: str, path: str, *answers: Answer, body_contains: str | None = None
    ) -> FakeApi:
        self.routes.append(Route(method, path, body_contains, list(answers)))
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert self.api_key not in str(request.url), "API key in a URL"
        assert request.headers.get("Authorization") == f"Bearer {self.api_key}"
        timeout = request.extensions.get("timeout", {})
        assert timeout, "request without a timeout"
        assert all(timeout.get(kind) is not None for kind in ("connect", "read"))
        self.requests.append(request)
        body = request.content.decode()
        for route in self.routes:
            if route.method != request.method or route.path != request.url.path:
                continue
            if route.body_contains is not None and route.body_contains not in body:
                continue
            answer = route.answers.pop(0) if len(route.answers) > 1 else route.answers[0]
            if isinstance(answer, Exception):
                raise answer
            if isinstance(answer, httpx.Response):
                return answer
            return answer(request)
        raise AssertionError(f"unexpected request {request.method} {request.url}")

    def calls(self, method: str | None = None, path: str | None = None) -> list[httpx.Request]:
        return [
            request
            for request in self.requests
            if (method is None or request.method == method)
            and (path is None or request.url.path == path)
        ]


@dataclass
class FakeTime:
    """The Clock's sleep/monotonic pair: sleeping records the delay and advances time."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def build(
    provider: str,
    api: FakeApi,
    *,
    time: FakeTime | None = None,
    retry_budget_seconds: float = 60,
    base_url: str | None = None,
    stop: threading.Event | None = None,
) -> BaseProvider:
    """A real provider adapter over a MockTransport serving ``api``; with ``stop``, its retry
    waits are the daemon's stoppable ones."""
    clock = time or FakeTime()
    client = httpx.Client(
        base_url=base_url or DEFAULT_API_URLS[provider], transport=httpx.MockTransport(api)
    )
    return PROVIDERS[provider](
        f"{provider}-main",
        client,
        api.api_key,
        sleep=clock.sleep if stop is None else stoppable_sleep(clock.sleep, stop),
        monotonic=clock.monotonic,
        retry_budget_seconds=retry_budget_seconds,
    )
