"""Logging set-up: logfmt lines (journald friendly) or JSON lines, and secret redaction.

Trailing ``key=value`` pairs of a message become top-level fields; under systemd every line gets
the sd-daemon priority prefix; every secret registered with :func:`register_secret` is masked in
every record and in the formatters' output. ``docs/architecture.md``, "Logs".
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import SecretStr

MASK = "***"
LogFormat = Literal["text", "json"]

# Values shorter than this are not masked: they would mask ordinary words in every line, and no
# real API key, token or passphrase is that short.
MIN_SECRET_LENGTH = 4

# Third-party loggers that are chatty at INFO/DEBUG or see secrets there: they only speak up from
# WARNING on, whatever log_level says. paramiko prints banner tracebacks; httpx/httpcore log every
# request URL at INFO; urllib3 (under Apprise's requests) logs ``POST /<path>`` at DEBUG, and
# Apprise services keep their tokens in URL paths; apprise
# itself logs URLs while it parses them; pydantic_settings can dump every loaded value; alembic
# logs a dozen INFO lines per start (the daemon logs the migration it ran itself).
QUIET_LOGGERS = (
    "paramiko",
    "httpx",
    "httpcore",
    "urllib3",
    "requests",
    "requests_oauthlib",
    "oauthlib",
    "apprise",
    "markdown",
    "pydantic_settings",
    "alembic",
)

# sd-daemon(3) priorities for the ``<N>`` prefix journald reads from a service's stderr.
JOURNAL_PRIORITIES = ((logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
_DEBUG_PRIORITY = 7
_CRITICAL_PRIORITY = 2


class _Registry:
    """The registered secrets (replaced, never mutated, so readers need no lock)."""

    def __init__(self) -> None:
        self.secrets: frozenset[str] = frozenset()
        self.factory_installed = False
        self.lock = threading.Lock()


_registry = _Registry()
_HANDLER_MARK = "_watchdog_gpu_handler"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def register_secret(value: str | SecretStr) -> None:
    """Mask ``value`` in every log record from now on (values under 4 characters are ignored)."""
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if len(text) < MIN_SECRET_LENGTH:
        return
    with _registry.lock:
        _registry.secrets = _registry.secrets | {text}
    install_redaction()


# Parts of a URL at least this long are treated as secrets (tokens, passwords, webhook ids).
URL_PART_MIN_LENGTH = 6
# Loopback hosts are not secrets, and masking them would hide useful detail.
_PUBLIC_HOSTS = frozenset({"127.0.0.1", "localhost"})


def url_secret_parts(url: str) -> frozenset[str]:
    """The parts of a URL that may be secrets: its user and password, the host
    (Apprise's ``tgram://BOT_TOKEN/CHAT`` keeps a token there), every path segment and query
    value long enough to be a token. Text that is not even URL-shaped is one secret whole."""
    try:
        split = urlsplit(url)
        candidates = [split.username, split.password, split.hostname]
        if split.hostname not in _PUBLIC_HOSTS:  # "BOT_ID:TOKEN" parses as a host and a port
            candidates.append(split.netloc)
        candidates.extend(unquote(segment) for segment in split.path.split("/"))
        candidates.extend(value for _, value in parse_qsl(split.query))
    except ValueError:
        return frozenset({url})
    parts = {part for part in candidates if part and len(part) >= URL_PART_MIN_LENGTH}
    return frozenset(parts - _PUBLIC_HOSTS)


def register_url_secret(url: str | SecretStr) -> None:
    """Mask a URL that embeds secrets (a notification route, a heartbeat URL) and each of its
    token-like parts: a library that logs only the request path (urllib3's ``POST /<token>``)
    or the host must not leak what the whole URL would."""
    text = url.get_secret_value() if isinstance(url, SecretStr) else url
    for part in {text} | url_secret_parts(text):
        register_secret(part)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***`` (:func:`mask_tokens`)."""
    secrets = _registry.secrets
    if not secrets:
        return text
    return mask_tokens(text, secrets)


# A secret is masked only where it stands as a whole token: not glued to letters, digits, "_"
# or "-", nor to a "." that joins it to another word ("watchdog_gpu.daemon", "watchdog-gpu").
# Masking it inside an ordinary word would shred every line and reveal the secret's text.
_WORD_BEFORE = r"(?<![\w-])(?<!\w\.)"
_WORD_AFTER = r"(?![\w-])(?!\.\w)"
_WORD_EDGE = re.compile(r"[\w-]")


@functools.lru_cache(maxsize=64)
def _token_pattern(secrets: frozenset[str]) -> re.Pattern[str]:
    alternatives = []
    # Longest first, so a secret that contains another (a URL and its token) is masked whole.
    for secret in sorted(secrets, key=lambda s: (-len(s), s)):
        before = _WORD_BEFORE if _WORD_EDGE.match(secret[0]) else ""
        after = _WORD_AFTER if _WORD_EDGE.match(secret[-1]) else ""
        alternatives.append(f"{before}{re.escape(secret)}{after}")
    return re.compile("|".join(alternatives))


def mask_tokens(text: str, secrets: frozenset[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` where it stands as a whole token
    (between spaces, quotes, ``/``, ``:``, ``=``, ``@``, ``&`` ... or at an end), never where it
    is part of a longer word."""
    known = frozenset(secret for secret in secrets if secret)
    if not known or not any(secret in text for secret in known):
        return text
    return _token_pattern(known).sub(MASK, text)


def _redact_record(record: logging.LogRecord) -> None:
    """Mask secrets in the record's message, arguments and exception text, in place."""
    if not _registry.secrets:
        return
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging itself reports it when formatting
        return
    masked = redact(message)
    if masked != message:
        record.msg = masked
        record.args = None
    for key, value in _extras(record).items():
        if isinstance(value, str) and redact(value) != value:
            setattr(record, key, redact(value))
    if record.exc_info and not record.exc_text:
        formatted = logging.Formatter().formatException(record.exc_info)
        masked_exception = redact(formatted)
        if masked_exception != formatted:
            # Formatters reuse exc_text instead of formatting exc_info again.
            record.exc_text = masked_exception


class RedactionFilter(logging.Filter):
    """A filter that masks registered secrets in every record it sees (and lets it pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def install_redaction() -> None:
    """Wrap the log record factory so every record is masked at creation, for every handler
    (including handlers someone else attached, such as pytest's). Idempotent."""
    with _registry.lock:
        if _registry.factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _redact_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _registry.factory_installed = True


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
    }


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(char in text for char in ' ="\\\n\r\t'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\r", "\\r").replace("\t", "\\t") + '"'


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# A field in a message: an identifier and ``=`` at the start or after white space.
_KEY = re.compile(r"([a-z_][a-z0-9_]*)=")
_FIRST_FIELD = re.compile(r"(?:^|(?<=\s))[a-z_][a-z0-9_]*=")
_NEXT_FIELD = re.compile(r"\s+(?=[a-z_][a-z0-9_]*=)")
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
# Keys every line already has: a message field of that name would overwrite them.
_RESERVED_KEYS = frozenset({"time", "level", "logger", "msg", "exc", "stack"})
# Values that are names, however they read: an instance id ``12345`` stays a string in JSON.
IDENTIFIER_KEYS = frozenset(
    {"instance", "account", "node", "rule", "action", "job", "provider", "gpu", "host", "name"}
)
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")


def _unquote(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return literal
    return value if isinstance(value, str) else literal


def split_message(message: str) -> tuple[str, list[tuple[str, str]]]:
    """A message's phrase and its trailing ``key=value`` fields, in order:
    ``"probe stream instance=7 state=backoff error=connection refused"`` is
    ``("probe stream", [("instance", "7"), ("state", "backoff"), ("error", "connection
    refused")])``. A field named like a line's own key (``level``, ``msg``, …) stays in the
    phrase, with everything after it."""
    first = _FIRST_FIELD.search(message)
    if first is None:
        return message, []
    phrase, rest = message[: first.start()].rstrip(), message[first.start() :]
    fields: list[tuple[str, str]] = []
    while rest:
        key_match = _KEY.match(rest)
        assert key_match is not None  # rest always starts at a field
        key = key_match.group(1)
        if key in _RESERVED_KEYS:
            return (f"{phrase} {rest}".strip(), fields)
        rest = rest[key_match.end() :]
        quoted = _QUOTED.match(rest)
        after = rest[quoted.end() :] if quoted else ""
        if quoted and (not after or _NEXT_FIELD.match(after)):
            value, rest = _unquote(quoted.group()), after.lstrip()
        else:
            following = _NEXT_FIELD.search(rest)
            end = following.start() if following else len(rest)
            value, rest = rest[:end].strip(), rest[end:].lstrip()
        fields.append((key, value))
    return phrase, fields


def _typed(key: str, value: object) -> object:
    """A JSON value: ``3`` a number, ``true`` a boolean, names (``instance=007``) text."""
    if not isinstance(value, str) or key in IDENTIFIER_KEYS:
        return value
    if value in {"true", "false"}:
        return value == "true"
    if _INTEGER.fullmatch(value):
        return int(value)
    if _DECIMAL.fullmatch(value):
        return float(value)
    return value


def record_fields(record: logging.LogRecord) -> tuple[str, dict[str, object]]:
    """The record's phrase and its fields: those of the message, then ``extra=`` ones (which win
    on a clash), secrets masked in both."""
    phrase, pairs = split_message(record.getMessage())
    fields: dict[str, object] = dict(pairs)
    for key, value in _extras(record).items():
        fields[f"extra_{key}" if key in _RESERVED_KEYS else key] = value
    masked = {
        key: redact(value) if isinstance(value, str) else value for key, value in fields.items()
    }
    return redact(phrase), masked


class KeyValueFormatter(logging.Formatter):
    """logfmt: ``time=… level=info logger=watchdog_gpu.poll msg="poll done" account=vast``, the
    message's fields and ``extra=`` fields as top-level ``key=value``; a traceback follows on the
    next lines. ``with_time=False`` leaves the time out (journald stamps every line itself)."""

    def __init__(self, *, with_time: bool = True) -> None:
        super().__init__()
        self.with_time = with_time

    def format(self, record: logging.LogRecord) -> str:
        phrase, message_fields = record_fields(record)
        fields: list[tuple[str, object]] = []
        if self.with_time:
            fields.append(("time", _timestamp(record)))
        fields += [("level", record.levelname.lower()), ("logger", record.name), ("msg", phrase)]
        fields += message_fields.items()
        line = " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``msg`` (the phrase), the
    message's fields and extras as top-level keys, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        phrase, fields = record_fields(record)
        document: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": phrase,
        }
        document.update((key, _typed(key, value)) for key, value in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exc"] = redact(record.exc_text)
        if record.stack_info:
            document["stack"] = redact(self.formatStack(record.stack_info))
        return redact(json.dumps(document, default=str, ensure_ascii=False))


def journal_priority(levelno: int) -> int:
    """The syslog priority of a logging level: CRITICAL 2, ERROR 3, WARNING 4, INFO 6, DEBUG 7
    (custom levels take the priority of the standard level at or below them)."""
    if levelno >= logging.CRITICAL:
        return _CRITICAL_PRIORITY
    for threshold, priority in JOURNAL_PRIORITIES:
        if levelno >= threshold:
            return priority
    return _DEBUG_PRIORITY


class JournalFormatter(logging.Formatter):
    """Wraps another formatter for a stream journald reads: every line of the record (a
    traceback's lines too, which journald stores as separate entries) starts with ``<N>``, the
    record's priority, so no part of an error is filed as info."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{journal_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).split("\n"))


def stream_is_journal(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journald stream systemd connected (``$JOURNAL_STREAM`` holds
    its ``device:inode``, see systemd.exec(5))."""
    env = os.environ if environ is None else environ
    device, _, inode = env.get("JOURNAL_STREAM", "").partition(":")
    try:
        status = os.fstat(stream.fileno())
        return (status.st_dev, status.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


def configure_logging(
    level: str | int = "info",
    fmt: LogFormat = "text",
    *,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Send the root logger's records at ``level`` and above to ``stream`` (default stderr) as
    ``key=value`` lines (``fmt="text"``) or JSON lines (``fmt="json"``), with redaction. Calling it
    again replaces the handler it installed before and leaves other handlers alone. Returns the
    handler. Raises ``ValueError`` for an unknown level name."""
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    target = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(target)
    journal = stream_is_journal(target, environ)
    formatter: logging.Formatter = (
        JsonFormatter() if fmt == "json" else KeyValueFormatter(with_time=not journal)
    )
    handler.setFormatter(JournalFormatter(formatter) if journal else formatter)
    handler.addFilter(RedactionFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(previous)
        previous.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, numeric))
    install_redaction()
    return handler
