"""The one way provider clients talk HTTP: key in a header, a timeout on every call, bounded
retries, typed errors, scrubbed payloads.

The rules it keeps: ``docs/providers.md``, "HTTP discipline". A retry wait ends early when the
daemon stops (:func:`stoppable_sleep` raises ``RetryCancelledError``, a ``TransientError``).
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import math
import random
import re
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

import httpx

from watchdog_gpu.errors import (
    AuthError,
    NotFoundError,
    PermanentError,
    ProviderError,
    RateLimitedError,
    RetryCancelledError,
    TransientError,
)
from watchdog_gpu.providers.scrub import scrub_decoded, scrub_text, truncate

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
# How often a stoppable retry wait looks at the stop event (seconds of the clock's time).
STOP_CHECK_SECONDS = 0.25
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0
USER_AGENT = "watchdog-gpu"

_EXCERPT_CHARS = 200
_MAX_URLS = 64  # paths remembered per account (listings, and an instance's own paths)
_RETRYABLE_STATUS = frozenset({408, 425, 429})
# Error codes in a body that mean "your key is wrong", whatever the HTTP status says.
_AUTH_ERROR_CODES = frozenset(
    {"auth_error", "global/invalid-api-key", "global/account-inactive", "global/forbidden"}
)
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


class ProviderHttp:
    """Retrying, scrubbing JSON requests for one provider account over a given ``httpx.Client``
    (whose ``base_url`` is the provider's API root).

    ``sleep`` and ``monotonic`` come from the Clock, so tests and the simulator never wait for
    real; ``rng`` drives the jitter.
    """

    def __init__(
        self,
        *,
        provider: str,
        account: str,
        client: httpx.Client,
        api_key: str,
        sleep: Callable[[float], None],
        monotonic: Callable[[], float],
        retry_budget_seconds: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        if not api_key:
            raise ValueError(f"{provider} account {account!r}: empty API key")
        self.provider = provider
        self.account = account
        self._client = client
        self._api_key = api_key
        self._sleep = sleep
        self._monotonic = monotonic
        self._budget = max(0.0, retry_budget_seconds)
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._timeout = _timeout_for(client)
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        # Each path's URL merged with the client's base URL once (httpx parses and joins them
        # on every request: a fifth of a listing's client-side cost); kept for that base URL.
        self._urls: dict[str, httpx.URL] = {}
        self._urls_base: httpx.URL | None = None

    @property
    def client(self) -> httpx.Client:
        """The ``httpx.Client`` this account talks through (its owner closes it)."""
        return self._client

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self._api_key,)

    def scrub(self, text: str) -> str:
        """``text`` without this account's key or anything shaped like a credential."""
        return scrub_text(text, self.secrets)

    def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        check: Callable[[object], T],
        accept_status: frozenset[int] = frozenset(),
    ) -> T:
        """Send one request (retrying as the module docstring says) and return
        ``check(payload)``, where ``payload`` is the scrubbed JSON body (``None`` for an empty
        body). ``check`` may raise ``TransientError`` to have a 2xx answer retried (a GraphQL
        internal error) or any other ``ProviderError``.

        Raises ``AuthError``, ``NotFoundError``, ``PermanentError``, ``RateLimitedError`` or
        ``TransientError``; their messages never contain the key.
        """
        deadline = self._monotonic() + self._budget
        attempt = 0
        while True:
            attempt += 1
            try:
                payload = self._attempt(
                    method, path, params=params, body=body, accept_status=accept_status
                )
                return check(payload)
            except (TransientError, RateLimitedError) as error:
                self._scrub_error(error)
                delay = self._delay(error, attempt)
                if self._monotonic() + delay > deadline:
                    raise
                logger.warning(
                    "provider call retried provider=%s account=%s method=%s path=%s "
                    "error_kind=%s status=%s attempt=%d retry_in_seconds=%.2f",
                    self.provider,
                    self.account,
                    method,
                    path,
                    error.kind,
                    error.status_code,
                    attempt,
                    delay,
                )
                self._sleep(delay)
            except ProviderError as error:
                self._scrub_error(error)
                raise

    def _attempt(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: object,
        accept_status: frozenset[int],
    ) -> object:
        where = f"{self.provider} {method} {path}"
        try:
            response = self._client.request(
                method,
                self._url(path),
                params=params,
                json=body,
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.TimeoutException as exc:
            raise TransientError(f"{where}: timed out ({type(exc).__name__})") from None
        except httpx.UnsupportedProtocol as exc:
            raise PermanentError(f"{where}: {self.scrub(str(exc))}") from None
        except httpx.TransportError as exc:
            detail = truncate(self.scrub(str(exc)), 120)
            raise TransientError(
                f"{where}: connection failed ({type(exc).__name__}: {detail})"
            ) from None
        return self._payload(where, response, accept_status)

    def _url(self, path: str) -> httpx.URL:
        """``path`` merged with the client's base URL, as httpx merges it for a request."""
        base = self._client.base_url
        if base is not self._urls_base or len(self._urls) >= _MAX_URLS:
            self._urls.clear()
            self._urls_base = base
        url = self._urls.get(path)
        if url is None:
            # httpx's own merge (``BaseClient._merge_url``): a relative path is appended to the
            # base URL, which always ends in "/".
            url = httpx.URL(path)
            if url.is_relative_url:
                url = base.copy_with(raw_path=base.raw_path + url.raw_path.lstrip(b"/"))
            self._urls[path] = url
        return url

    def _payload(
        self, where: str, response: httpx.Response, accept_status: frozenset[int]
    ) -> object:
        status = response.status_code
        decoded = _decode(response)
        payload = scrub_decoded(decoded, self.secrets) if decoded is not _NOT_JSON else None
        if 200 <= status < 300:
            if decoded is _NOT_JSON:
                raise PermanentError(
                    f"{where}: HTTP {status} with a body that is not JSON: "
                    f"{self._excerpt(response, None)}",
                    status_code=status,
                )
            return payload
        message = f"{where}: HTTP {status}: {self._excerpt(response, payload)}"
        if status in (401, 403) or _says_auth_failure(payload):
            raise AuthError(message, status_code=status)
        if status in accept_status and decoded is not _NOT_JSON and decoded is not None:
            return payload
        raise _status_error(where, message, response)

    def _excerpt(self, response: httpx.Response, payload: object) -> str:
        text = _message_from(payload) if payload is not None else None
        if text is None:
            raw = response.text
            title = _HTML_TITLE.search(raw)
            if title is not None or raw.lstrip().startswith("<"):
                text = f"HTML page {title.group(1).strip()!r}" if title else "HTML page"
            else:
                text = raw or "(empty body)"
        return truncate(self.scrub(text), _EXCERPT_CHARS)

    def _scrub_error(self, error: ProviderError) -> None:
        # Messages built by parsers quote provider text: scrub them like ours.
        error.args = tuple(self.scrub(str(arg)) for arg in error.args)

    def _delay(self, error: ProviderError, attempt: int) -> float:
        if (
            isinstance(error, (RateLimitedError, _RetryableHttpError))
            and error.retry_after_seconds is not None
        ):
            return error.retry_after_seconds
        ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** (attempt - 1))
        # "Equal jitter": at least half the exponential step, so retries always back off.
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)


def stoppable_sleep(
    sleep: Callable[[float], None], stop: threading.Event
) -> Callable[[float], None]:
    """A retry wait over the clock's ``sleep`` that the daemon's ``stop`` event cuts short: it
    sleeps in slices of :data:`STOP_CHECK_SECONDS` and raises :class:`RetryCancelledError` when
    the event is set before, during or at the end of the wait, so the retry budget of a call in
    flight is abandoned and the job ends within a fraction of a second of the stop. (Slices are
    counted, not measured against a deadline: a virtual clock cannot advance by less than a
    microsecond.)"""

    def wait(seconds: float) -> None:
        remaining = seconds
        while True:
            if stop.is_set():
                raise RetryCancelledError("retry cancelled: watchdog-gpu is stopping")
            if remaining <= 0:
                return
            step = min(remaining, STOP_CHECK_SECONDS)
            sleep(step)
            remaining -= step

    return wait


def retry_after_seconds(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds: a number of seconds, or an HTTP date measured against the
    response's own ``Date`` header (the server's clock, so no wall clock is read here).
    ``None`` when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        return _seconds_until_http_date(value, response.headers.get("Date"))
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _seconds_until_http_date(value: str, date_header: str | None) -> float | None:
    if date_header is None:
        return None
    try:
        target = email.utils.parsedate_to_datetime(value)
        reference = email.utils.parsedate_to_datetime(date_header)
    except (TypeError, ValueError):
        return None
    if target.tzinfo is None or reference.tzinfo is None:
        return None
    return max(0.0, (target - reference).total_seconds())


class _RetryableHttpError(TransientError):
    """A 5xx/408/425 answer; remembers its ``Retry-After`` (a 503 may carry one)."""

    def __init__(
        self, message: str, *, status_code: int, retry_after_seconds: float | None
    ) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message, status_code=status_code)


class _NotJson:
    """Marker for a body that did not decode as JSON."""


_NOT_JSON = _NotJson()


def _decode(response: httpx.Response) -> object:
    if not response.content.strip():
        return None
    try:
        decoded: object = json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON
    return decoded


def _message_from(payload: object) -> str | None:
    """The human part of the error shapes the three providers use: Vast ``{"error", "msg"}`` /
    ``{"detail"}``, RunPod REST ``{"message"}`` / RFC 9457 ``{"title", "detail"}``, GraphQL
    ``{"errors": [{"message"}]}``, Lambda ``{"error": {"code", "message"}}``."""
    if isinstance(payload, str):
        return payload
    if not isinstance(payload, dict):
        return None
    parts = _message_parts(payload)
    texts = [str(part) for part in parts if isinstance(part, (str, int)) and part != ""]
    return ": ".join(texts) if texts else None


def _message_parts(payload: dict[str, object]) -> list[object]:
    error = payload.get("error")
    if isinstance(error, dict):
        parts = [error.get("code"), error.get("message")]
    else:
        parts = [error, *(payload.get(key) for key in ("msg", "message", "title", "detail"))]
    errors = payload.get("errors")
    if isinstance(errors, list):
        parts += [entry.get("message") for entry in errors if isinstance(entry, dict)]
    return parts


def _status_error(where: str, message: str, response: httpx.Response) -> ProviderError:
    """The error of a non-2xx answer that is neither an auth failure nor accepted: 429 and
    5xx (and the other retryable statuses) are retried, 404 is "not found", the rest fail."""
    status = response.status_code
    if status == 429:
        return RateLimitedError(message, retry_after_seconds=retry_after_seconds(response))
    if status >= 500 or status in _RETRYABLE_STATUS:
        return _RetryableHttpError(
            message, status_code=status, retry_after_seconds=retry_after_seconds(response)
        )
    if status == 404:
        return NotFoundError(message, status_code=status)
    if 300 <= status < 400:
        return PermanentError(f"{where}: unexpected redirect (HTTP {status})", status_code=status)
    return PermanentError(message, status_code=status)


def _says_auth_failure(payload: object) -> bool:
    if not isinstance(payload, dict):
        return False
    error = payload.get("error")
    code = error.get("code") if isinstance(error, dict) else error
    return isinstance(code, str) and code in _AUTH_ERROR_CODES


def _timeout_for(client: httpx.Client) -> httpx.Timeout:
    configured = client.timeout
    if configured.connect is None or configured.read is None:
        return DEFAULT_TIMEOUT
    return configured


def new_http_client(
    base_url: str,
    *,
    timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """The ``httpx.Client`` one account's provider should get: its API root, timeouts, no
    redirects (a redirect would drop or leak the ``Authorization`` header), no cookies kept
    between polls beyond the client's life. Every client shares one TLS context
    (:func:`shared_tls_context`)."""
    return httpx.Client(
        base_url=base_url,
        timeout=timeout,
        transport=transport,
        follow_redirects=False,
        verify=shared_tls_context(),
    )


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """The TLS context of every provider client: httpx's default verification (certifi's CA
    bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), built once. A client given no context
    builds its own and loads the whole CA bundle into it, resident per account
    (bench/README.md, "The daemon's memory floor"). A context is safe to share
    between threads; each connection still gets its own TLS session."""
    return httpx.create_ssl_context()
