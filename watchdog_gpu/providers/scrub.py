"""Removing secrets from provider payloads and texts before anything keeps or prints them.

Vast's ``GET /users/current/`` echoes the caller's API key in its body (vast.md §2), instance
rows carry Jupyter tokens, Lambda can return a generated private key, RunPod pods list their
environment. Every payload a client decodes goes through :func:`scrub_payload`, and every text
that can end up in an exception or a log line goes through :func:`scrub_text`, with the account's
own key as a known secret. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"

# Field names whose values are secrets, whatever they hold.
_SECRET_FIELD = re.compile(
    r"(api[_-]?key|apikey|token|secret|passw(or)?d|authori[sz]ation|private[_-]?key|"
    r"credential|cookie|session|^sid$|jupyter_url)",
    re.IGNORECASE,
)
# "NAME=value" environment entries whose name says secret (RunPod pods list their env).
_SECRET_ENV = re.compile(
    r"^(?P<name>[A-Za-z0-9_]*(PASSWORD|PASSWD|TOKEN|SECRET|API_KEY|APIKEY|PRIVATE_KEY)"
    r"[A-Za-z0-9_]*)=.*$",
    re.IGNORECASE | re.DOTALL,
)
_TEXT_PATTERNS = (
    # Authorization: Bearer xyz / Basic xyz
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"),
    # api_key=xyz, "api_key": "xyz", token: xyz … in query strings, JSON or prose (values of 8+
    # characters: credentials are long, and "invalid-api-key: API key was…" must stay readable)
    re.compile(
        r"(?i)([\"']?\b[A-Za-z0-9_-]*(api[_-]?key|apikey|token|secret|password|passwd)"
        r"[\"']?\s*[:=]\s*[\"']?)([^\"'&\s,;}]{8,})"
    ),
)
# Pagination cursors are opaque but not secret, and paging needs them intact.
_NOT_SECRET_FIELDS = frozenset({"next_token", "after_token"})
_MIN_SECRET_LENGTH = 4  # replacing "a" everywhere would shred a message and hide nothing


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret and anything shaped like a credential replaced by
    ``[REDACTED]``."""
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    text = _TEXT_PATTERNS[0].sub(lambda match: f"{match.group(1)} {REDACTED}", text)
    return _TEXT_PATTERNS[1].sub(lambda match: f"{match.group(1)}{REDACTED}", text)


def scrub_payload(value: object, secrets: Iterable[str] = ()) -> object:
    """A copy of a decoded JSON value with secrets removed: values of secret-named fields,
    secret ``NAME=value`` strings, and any string containing a known secret."""
    known = tuple(secret for secret in secrets if secret and len(secret) >= _MIN_SECRET_LENGTH)
    return _scrub(value, known)


def truncate(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis), whitespace runs collapsed."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _scrub(value: object, secrets: tuple[str, ...]) -> object:
    kind = type(value)
    if kind in _PLAIN:  # most values of a listing: nothing to look at, no call per value
        return value
    if isinstance(value, dict):
        scrubbed: dict[object, object] = {}
        verdicts = _FIELD_VERDICTS
        for key, item in value.items():
            secret = verdicts.get(key) if type(key) is str else None
            if secret is None:
                secret = _secret_field(key)
            if secret:
                scrubbed[key] = _redact_value(item)
            elif type(item) in _PLAIN:
                scrubbed[key] = item
            else:
                scrubbed[key] = _scrub(item, secrets)
        return scrubbed
    if isinstance(value, list):
        return [item if type(item) in _PLAIN else _scrub(item, secrets) for item in value]
    if isinstance(value, str):
        return _scrub_string(value, secrets)
    return value


# Decoded JSON values that hold no text (exact types: a subclass goes the long way).
_PLAIN = frozenset({int, float, bool, type(None)})


# A poll scrubs every field of every instance (≈ 50,000 values a minute at 1,000 instances)
# under a few dozen distinct field names: each name's verdict is kept.
_FIELD_VERDICTS: dict[str, bool] = {}
_MAX_FIELD_VERDICTS = 4096


def _secret_field(key: object) -> bool:
    if not isinstance(key, str):
        return False
    verdict = _FIELD_VERDICTS.get(key)
    if verdict is None:
        if len(_FIELD_VERDICTS) >= _MAX_FIELD_VERDICTS:
            _FIELD_VERDICTS.clear()
        verdict = _FIELD_VERDICTS[key] = key not in _NOT_SECRET_FIELDS and bool(
            _SECRET_FIELD.search(key)
        )
    return verdict


def _redact_value(value: object) -> object:
    # Keep null, booleans and "" visible ("no token set" is useful and not a secret).
    if value is None or isinstance(value, bool) or value == "":
        return value
    return REDACTED


def _scrub_string(value: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in value:
            value = value.replace(secret, REDACTED)
    match = _SECRET_ENV.match(value) if "=" in value else None  # NAME=value needs its "="
    if match:
        return f"{match.group('name')}={REDACTED}"
    return value
