"""Deliver outbox notifications through Apprise, routed by severity, retried with backoff.

``AppriseDelivery`` sends a message to the routes tagged with its severity (inline routes or an
Apprise config file, ``[notify] config``) and reads Apprise's result: only SUCCESS is delivered.
``deliver_due`` sends each severity's due messages as one batch; a failure is retried later and
never blocks an action. Raw URLs never leave this module unmasked. ``docs/safety.md``,
"Notifications"; ``deploy/README.md`` for the tags.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qsl, urlsplit

from watchdog_gpu.config import NotifySection
from watchdog_gpu.errors import ConfigError, ConfigProblem
from watchdog_gpu.log import mask_tokens, url_secret_parts
from watchdog_gpu.model import PlannedNotification, Severity
from watchdog_gpu.notify.render import render_batch, render_test, sent_from
from watchdog_gpu.reports import DeliveryReport

if TYPE_CHECKING:
    # Apprise (megabytes resident) is imported only where routes are built or a message
    # is sent: a daemon without notification routes never loads it.
    import apprise
    from apprise.plugins.base import NotifyBase

logger = logging.getLogger(__name__)

# Apprise shows a colour/icon per type; our severities onto its four types (names of
# ``apprise.NotifyType``, looked up when a message is sent).
_NOTIFY_TYPES = {
    Severity.INFO: "INFO",
    Severity.WARNING: "WARNING",
    Severity.CRITICAL: "FAILURE",
}
_DETAIL_LIMIT = 500
_LOG_LINES_LIMIT = 3


@dataclass(frozen=True, slots=True)
class Route:
    """One Apprise URL and the severities it receives. ``url`` is a secret; ``label`` (e.g. the
    config path ``notify.routes[0]``) names it in errors and logs."""

    url: str = field(repr=False)
    severities: frozenset[Severity]
    label: str = ""


# Tags of a config-file service that route messages to it (``always`` takes every severity).
ALWAYS_TAG = "always"
ROUTING_TAGS = frozenset({*(severity.value for severity in Severity), ALWAYS_TAG})


@dataclass(frozen=True, slots=True)
class AppriseConfigText:
    """The contents of an Apprise config file (a secret: it holds the services' URLs); ``label``
    (``notify.config``) names it in errors and ``notify test``."""

    text: str = field(repr=False)
    label: str = "notify.config"


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """``ok``: the outbox may mark the message delivered. ``routed`` is False when no route
    takes its severity (delivered to nobody, on purpose). ``detail`` is safe to log and store."""

    ok: bool
    detail: str
    routed: bool = True


@dataclass(frozen=True, slots=True)
class RouteTestResult:
    """The outcome of ``notify test`` for one route (``url`` is privacy-masked)."""

    label: str
    url: str
    severities: frozenset[Severity]
    ok: bool
    detail: str


class Deliverer(Protocol):
    """Anything that can deliver one notification (``AppriseDelivery``, a test double)."""

    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        """Send it; never raises."""
        ...


class ClaimedNotification(Protocol):
    """One message the outbox handed out (the store's ``NotificationRow``)."""

    @property
    def notification(self) -> PlannedNotification: ...

    @property
    def attempts(self) -> int:
        """Failed deliveries so far (not counting this one)."""
        ...


class NotificationOutbox(Protocol):
    """The part of the store (``watchdog_gpu.store.Store``) that ``deliver_due`` uses."""

    def claim_due_notifications(self, now: datetime, limit: int) -> Sequence[ClaimedNotification]:
        """Claim undelivered messages whose next attempt is due at ``now``, oldest first."""
        ...

    def mark_notification_delivered(self, key: str, now: datetime) -> object: ...

    def mark_notification_failed(
        self, key: str, now: datetime, error: str, next_attempt_at: datetime
    ) -> object:
        """Count a failed attempt; keep the message queued until ``next_attempt_at``."""
        ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential retry delays: ``initial`` after the first failure, doubling up to
    ``maximum``."""

    initial: timedelta = timedelta(seconds=30)
    maximum: timedelta = timedelta(hours=1)

    def delay(self, failures: int) -> timedelta:
        """The wait after the ``failures``-th consecutive failure (1 → ``initial``)."""
        delay = self.initial
        for _ in range(max(failures, 1) - 1):
            if delay >= self.maximum:
                break
            delay *= 2
        return min(delay, self.maximum)


class AppriseDelivery:
    """Routes by severity through one ``apprise.Apprise`` instance built from the routes.

    ``apprise_factory`` is the seam: it returns a fresh ``apprise.Apprise`` (tests may pass one
    with a custom asset). Raises ConfigError listing every route whose URL Apprise rejects or
    that has no severities; the message names the route's label and URL scheme, never the URL.
    """

    def __init__(
        self,
        routes: Sequence[Route],
        *,
        config: AppriseConfigText | None = None,
        apprise_factory: Callable[[], apprise.Apprise] | None = None,
        timeout_seconds: float = 30.0,
        host: str | None = None,
    ) -> None:
        import apprise

        if apprise_factory is None:
            apprise_factory = apprise.Apprise
        self._routes = tuple(routes)
        self._factory = apprise_factory
        self._timeout_seconds = timeout_seconds
        # every message names the host it was sent from (``[watchdog] node_name`` or the host)
        self._host = host or socket.gethostname()
        self._services: tuple[NotifyBase, ...] = ()
        self._config_label = config.label if config is not None else ""
        problems: list[ConfigProblem] = []
        if config is not None:
            self._services, problem = _config_services(config)
            problems.extend(problem)
        self._secrets = _every_secret_part(self._routes, self._services)
        self._unrouted_logged: set[Severity] = set()
        self._apprise = apprise_factory()
        self._masked: list[str] = []
        for index, route in enumerate(self._routes):
            problems.extend(self._add_route(index, route))
        for service in self._services:
            self._apprise.add(service)
            self._masked.append(mask_tokens(_service_url(service, privacy=True), self._secrets))
        if problems:
            raise ConfigError(problems)

    def _add_route(self, index: int, route: Route) -> list[ConfigProblem]:
        """Add ``route`` to the Apprise instance; what is wrong with it (empty: nothing)."""
        label = route.label or f"routes[{index}]"
        problems: list[ConfigProblem] = []
        if not route.severities:
            problems.append(ConfigProblem(f"{label}.severities", "lists no severity"))
        masked = _add_route(self._apprise, route)
        if masked is None:
            problems.append(ConfigProblem(f"{label}.url", _invalid_url_message(route.url)))
        self._masked.append(mask_tokens(masked or "", self._secrets))
        return problems

    @property
    def secret_parts(self) -> frozenset[str]:
        """Every raw URL part that may be a secret (for log redaction)."""
        return self._secrets

    @property
    def masked_urls(self) -> tuple[str, ...]:
        """Each route's URL in Apprise's privacy-masked form (safe to show)."""
        return tuple(self._masked)

    def deliver(self, notification: PlannedNotification) -> DeliveryResult:
        """Send ``notification`` to every route taking its severity; never raises."""
        import apprise

        severity = notification.severity
        try:
            result = self._apprise.notify(
                body=sent_from(notification.body, self._host),
                title=notification.title,
                notify_type=apprise.NotifyType[_NOTIFY_TYPES[severity]],
                body_format=apprise.NotifyFormat.TEXT,
                tag=severity.value,
                timeout=self._timeout_seconds,
            )
        except Exception as error:  # a notifier must never stop the loop
            return DeliveryResult(ok=False, detail=f"apprise raised {type(error).__name__}")
        with result:
            status = result.status
            if status == apprise.AppriseResultStatus.NOMATCH:
                if severity not in self._unrouted_logged:
                    self._unrouted_logged.add(severity)
                    logger.warning(
                        "no notification route takes it: such messages go nowhere severity=%s",
                        severity.value,
                    )
                return DeliveryResult(
                    ok=True, detail=f"no route for severity {severity.value}", routed=False
                )
            detail = self._describe(result)
            return DeliveryResult(ok=bool(result), detail=detail)

    def test_routes(self, notification: PlannedNotification) -> list[RouteTestResult]:
        """Send ``notification`` to each route and each config-file service on its own, whatever
        its severities."""
        import apprise

        results: list[RouteTestResult] = []
        targets: list[tuple[str, frozenset[Severity], Callable[[apprise.Apprise], str | None]]] = [
            (route.label or f"routes[{index}]", route.severities, _adder(route))
            for index, route in enumerate(self._routes)
        ]
        targets += [
            (f"{self._config_label}[{index}]", service_severities(service), _service_adder(service))
            for index, service in enumerate(self._services)
        ]
        for label, severities, add in targets:
            single = self._factory()
            masked = mask_tokens(add(single) or "", self._secrets)
            try:
                result = single.notify(
                    body=sent_from(notification.body, self._host),
                    title=notification.title,
                    notify_type=apprise.NotifyType.INFO,
                    body_format=apprise.NotifyFormat.TEXT,
                    timeout=self._timeout_seconds,
                )
            except Exception as error:  # report it like any other failed route
                results.append(
                    RouteTestResult(label, masked, severities, False, type(error).__name__)
                )
                continue
            with result:
                detail = "" if result else self._failure(result)
                results.append(RouteTestResult(label, masked, severities, bool(result), detail))
        return results

    def _failure(self, result: apprise.AppriseResult) -> str:
        """Why a one-route test failed, said once: Apprise's error lines (scrubbed), or its
        status when it logged none (the route's URL is shown beside it already)."""
        text = "; ".join(_error_lines(result)) or result.status.name
        return mask_tokens(text, self._secrets)[:_DETAIL_LIMIT]

    def _describe(self, result: apprise.AppriseResult) -> str:
        """Status, each service (masked URL) and the first error lines, scrubbed of anything that
        looks like a part of a raw route URL (Apprise's masking keeps e.g. json:// paths, which
        can be webhook tokens)."""
        parts = [result.status.name]
        parts.extend(f"{service.url} {service.status.name}" for service in result)
        parts.extend(_error_lines(result))
        return mask_tokens("; ".join(parts), self._secrets)[:_DETAIL_LIMIT]


def deliver_due(
    outbox: NotificationOutbox,
    delivery: Deliverer,
    now: datetime,
    backoff: Backoff,
    *,
    limit: int = 50,
) -> DeliveryReport:
    """Deliver up to ``limit`` due messages; failures stay queued until a later attempt.

    Given the store's outbox, a deliverer, ``now`` and the retry backoff. Messages of one
    severity are delivered as one batch and share its outcome. The n-th failed attempt
    of a message is marked due again at ``now + backoff.delay(n)``; one failing message never
    stops the others.
    Returns counts of delivered, unrouted (no route for the severity) and failed messages.
    Store errors propagate (the tick records them); delivery itself never raises.
    """
    report = DeliveryReport()
    batches: dict[Severity, list[ClaimedNotification]] = {}
    for claimed in outbox.claim_due_notifications(now, limit):
        batches.setdefault(claimed.notification.severity, []).append(claimed)
    for batch in batches.values():
        message = render_batch([claimed.notification for claimed in batch], now)
        result = delivery.deliver(message)
        for claimed in batch:
            _record_result(outbox, claimed, result, now=now, backoff=backoff, report=report)
    return report


def _record_result(
    outbox: NotificationOutbox,
    claimed: ClaimedNotification,
    result: DeliveryResult,
    *,
    now: datetime,
    backoff: Backoff,
    report: DeliveryReport,
) -> None:
    """Mark one message of a delivered (or failed) batch and count it."""
    message = claimed.notification
    if result.ok:
        outbox.mark_notification_delivered(message.idempotency_key, now)
        if result.routed:
            report.delivered += 1
            logger.info(
                "notification delivered key=%s severity=%s",
                message.idempotency_key,
                message.severity.value,
            )
        else:
            report.unrouted += 1
        return
    failures = claimed.attempts + 1
    next_attempt_at = now + backoff.delay(failures)
    outbox.mark_notification_failed(message.idempotency_key, now, result.detail, next_attempt_at)
    report.failed += 1
    logger.warning(
        "notification delivery failed key=%s severity=%s attempts=%d next_attempt_at=%s detail=%s",
        message.idempotency_key,
        message.severity.value,
        failures,
        next_attempt_at.isoformat(),
        result.detail,
    )


def notify_test(delivery: AppriseDelivery, now: datetime) -> list[RouteTestResult]:
    """Send the test message (``render_test(now)``) to every route; one result per route."""
    return delivery.test_routes(render_test(now))


def _add_route(target: apprise.Apprise, route: Route, *, tagged: bool = True) -> str | None:
    """Add ``route`` to ``target``; the masked URL(s), or None when Apprise rejects it."""
    before = len(target)
    tags = sorted(severity.value for severity in route.severities) if tagged else None
    if not target.add(route.url, tag=tags) or len(target) == before:
        return None
    return " ".join(target.urls(privacy=True)[before:])


def _error_lines(result: apprise.AppriseResult) -> list[str]:
    """The first distinct warning/error lines Apprise logged for ``result`` (raw, unscrubbed)."""
    messages = (
        entry.message for entry in result.logs() if entry.level in {"WARNING", "ERROR", "CRITICAL"}
    )
    return list(dict.fromkeys(messages))[:_LOG_LINES_LIMIT]


def _adder(route: Route) -> Callable[[apprise.Apprise], str | None]:
    return lambda target: _add_route(target, route, tagged=False)


def _service_adder(service: NotifyBase) -> Callable[[apprise.Apprise], str | None]:
    def add(target: apprise.Apprise) -> str | None:
        target.add(service)
        return _service_url(service, privacy=True)

    return add


def _service_url(service: NotifyBase, *, privacy: bool) -> str:
    """A config-file service's URL: raw (a secret) or privacy-masked (safe to show)."""
    return str(service.url(privacy=privacy))  # type: ignore[no-untyped-call]


def _service_secret_parts(service: NotifyBase) -> frozenset[str]:
    """The secret-looking parts of a config-file service's URL, except query values Apprise
    itself shows in the privacy-masked URL (its defaults such as ``overflow=upstream``: masking
    those would hide ordinary words everywhere)."""
    shown = {value for _, value in parse_qsl(urlsplit(_service_url(service, privacy=True)).query)}
    return url_secret_parts(_service_url(service, privacy=False)) - shown


def service_severities(service: NotifyBase) -> frozenset[Severity]:
    """The severities a config-file service receives, from its tags."""
    tags = {str(tag) for tag in service.tags}
    if ALWAYS_TAG in tags:
        return frozenset(Severity)
    return frozenset(severity for severity in Severity if severity.value in tags)


def _every_secret_part(routes: Iterable[Route], services: Iterable[NotifyBase]) -> frozenset[str]:
    """Every URL part of the inline routes and the config file's services that may be a
    secret."""
    from_services = (part for service in services for part in _service_secret_parts(service))
    return _secret_parts(route.url for route in routes) | frozenset(from_services)


def _config_services(
    config: AppriseConfigText,
) -> tuple[tuple[NotifyBase, ...], list[ConfigProblem]]:
    """The services of an Apprise config, or the problems that make it unusable: not a config
    Apprise reads, no service in it, or a service tagged with no severity (it would receive
    nothing). Problems name services by position and scheme, never by URL."""
    import apprise

    parsed = apprise.AppriseConfig()
    if not parsed.add_config(config.text):
        return (), [ConfigProblem(config.label, "not an Apprise config file (YAML or text)")]
    services = tuple(parsed.services())
    if not services:
        return (), [ConfigProblem(config.label, "lists no service Apprise can use")]
    untagged = [
        f"#{index + 1} ({_service_url(service, privacy=True).split('://', 1)[0]}://)"
        for index, service in enumerate(services)
        if not {str(tag) for tag in service.tags} & ROUTING_TAGS
    ]
    if untagged:
        return (), [
            ConfigProblem(
                config.label,
                f"service {', '.join(untagged)} has no tag among info, warning, critical, "
                "always: it would receive nothing",
            )
        ]
    return services, []


def config_from_section(
    section: NotifySection, environ: Mapping[str, str] | None = None
) -> AppriseConfigText | None:
    """The contents of ``[notify] config`` (None when not set). Raises ConfigError when the
    file or secret cannot be read."""
    if section.config is None:
        return None
    text = section.config.resolve(environ)
    if text is None:
        message = f"{section.config.describe(environ)}: no Apprise config"
        raise ConfigError([ConfigProblem("notify.config", message)])
    return AppriseConfigText(text.get_secret_value())


def _invalid_url_message(url: str) -> str:
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not scheme or len(scheme) > 20 or not scheme.isalnum():
        return "not an Apprise URL (expected scheme://...)"
    return f"Apprise cannot use this {scheme}:// URL (unknown scheme or missing parts)"


def _secret_parts(urls: Iterable[str]) -> frozenset[str]:
    """The parts of raw URLs that may be secrets (:func:`watchdog_gpu.log.url_secret_parts`)."""
    return frozenset(part for url in urls for part in url_secret_parts(url))


def routes_from_config(
    section: NotifySection, environ: Mapping[str, str] | None = None
) -> list[Route]:
    """The routes of a ``[notify]`` section with their URLs resolved from their secret
    references. Raises ConfigError listing every route whose URL secret is missing."""
    routes: list[Route] = []
    problems: list[ConfigProblem] = []
    for index, configured in enumerate(section.routes):
        label = f"notify.routes[{index}]"
        url = configured.url.resolve(environ)
        if url is None:
            problems.append(
                ConfigProblem(f"{label}.url", f"{configured.url.describe(environ)}: no URL")
            )
            continue
        severities = frozenset(Severity(name) for name in configured.severities)
        routes.append(Route(url.get_secret_value(), severities, label=label))
    if problems:
        raise ConfigError(problems)
    return routes
