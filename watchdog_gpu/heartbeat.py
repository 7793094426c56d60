"""The dead-man's switch: an HTTP ping after every evaluation (e.g. healthchecks.io).

The watchdog can alert about everything except its own death: a laptop asleep, a crashed
service, a VPS gone. An outside service that expects a ping every few minutes and alerts when
the pings stop covers that. The daemon pings ``[watchdog] dead_mans_switch_url`` after each
evaluation that was healthy (every account polled recently, no rule failed). After an unhealthy
one (or an evaluation that failed) it signals failure at once, as borgmatic does with
healthchecks.io: a POST to the URL with ``/fail`` appended, the reason (account names, error
kinds, rule names: never a secret) as the body. healthchecks.io alerts on it immediately, with
the reason in its log; a service without a ``/fail`` endpoint just misses the success ping and
raises the alarm when its grace time runs out.

The URL is a secret (healthchecks.io's ping URLs are bearer tokens): it is registered for log
redaction, and nothing here logs it or an exception text that could contain it, only the error's
type or the HTTP status. A failed ping is logged and reported as False, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import httpx

from watchdog_gpu.config import Settings
from watchdog_gpu.errors import ConfigError, ConfigProblem
from watchdog_gpu.log import register_url_secret
from watchdog_gpu.providers.http import shared_tls_context

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 10.0
SETTING_PATH = "watchdog.dead_mans_switch_url"


class DeadMansSwitch:
    """GETs one URL on :meth:`ping`. Given the URL (a secret), a timeout and optionally an
    httpx transport (tests). Raises ConfigError when the URL is not an http(s) URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        register_url_secret(url)  # the ping URL holds its check token in the path
        if not _is_http_url(url):
            # Never the value: it is a secret.
            raise ConfigError([ConfigProblem(SETTING_PATH, "must be an http:// or https:// URL")])
        self._url = url
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_seconds),
            transport=transport,
            follow_redirects=True,
            headers={"user-agent": "watchdog-gpu dead-man's switch"},
            verify=shared_tls_context(),  # not a CA bundle of its own (providers/http.py)
        )
        self._failing = False

    def ping(self) -> bool:
        """One GET of the URL: True on a 2xx answer; False (logged, never raised) otherwise."""
        try:
            response = self._client.get(self._url)
        except Exception as error:  # a ping must never take the daemon down
            # The type only: httpx error texts may repeat the URL.
            self._report_failure(f"error={type(error).__name__}")
            return False
        if not response.is_success:
            self._report_failure(f"status={response.status_code}")
            return False
        if self._failing:
            log.info("dead-man's switch ping works again")
        self._failing = False
        log.debug("dead-man's switch pinged status=%d", response.status_code)
        return True

    def fail(self, reason: str) -> bool:
        """Signal an unhealthy watchdog: POST ``reason`` to the URL's ``/fail`` endpoint
        (healthchecks.io). True on a 2xx answer; False (logged, never raised) otherwise."""
        try:
            response = self._client.post(_fail_url(self._url), content=reason.encode())
        except Exception as error:  # a ping must never take the daemon down
            self._report_failure(f"error={type(error).__name__}")
            return False
        if not response.is_success:
            self._report_failure(f"status={response.status_code}")
            return False
        log.debug("dead-man's switch told of failure status=%d", response.status_code)
        return True

    def close(self) -> None:
        self._client.close()

    def _report_failure(self, detail: str) -> None:
        self._failing = True
        log.warning("dead-man's switch ping failed %s", detail)


def dead_mans_switch_from_settings(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> DeadMansSwitch | None:
    """The switch for ``[watchdog] dead_mans_switch_url``, or None when it is not set.
    Raises ConfigError when the secret is unavailable or not an http(s) URL."""
    reference = settings.watchdog.dead_mans_switch_url
    if reference is None:
        return None
    status = reference.lookup(environ)
    if status.value is None:
        raise ConfigError(
            [
                ConfigProblem(
                    SETTING_PATH, f"secret not available: {reference.source} ({status.detail})"
                )
            ]
        )
    return DeadMansSwitch(status.value.get_secret_value())


def _fail_url(url: str) -> str:
    """``url`` with ``/fail`` appended to its path (its query string kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/fail"))


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)
