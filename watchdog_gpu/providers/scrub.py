"""Removing secrets from provider payloads and texts before anything keeps or prints them.

Vast's ``GET /users/current/`` echoes the caller's API key in its body (docs/providers.md,
"Sources"), instance rows carry Jupyter tokens, Lambda can return a generated private key, RunPod
pods list their environment. Every payload a client decodes goes through :func:`scrub_payload`, and
every text that can end up in an exception or a log line goes through :func:`scrub_text`, with the
account's own key as a known secret. Pure: no I/O.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import cast

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
    return scrub_decoded(copy.deepcopy(value), secrets)


def scrub_decoded(value: object, secrets: Iterable[str] = ()) -> object:
    """:func:`scrub_payload` for a value the caller just decoded and owns: its dicts and lists
    are scrubbed where they are (no copy of a whole listing on every poll), and it is returned
    (a lone string comes back as a new one)."""
    known = tuple(secret for secret in secrets if secret and len(secret) >= _MIN_SECRET_LENGTH)
    kind = type(value)
    if kind is dict:
        _scrub_dict(cast(dict[object, object], value), known)
        return value
    if kind is list:
        _scrub_list(cast(list[object], value), known)
        return value
    return _scrub(value, known)


def truncate(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis), whitespace runs collapsed."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _scrub_dict(value: dict[object, object], secrets: tuple[str, ...]) -> None:
    # Every field of every instance of a listing passes here, every poll: the common kinds are
    # handled inline, and a value is only stored back
    # when scrubbing changed it (replacing a key's value keeps the dict's size, so iterating
    # it meanwhile is safe).
    verdicts = _FIELD_VERDICTS
    plain = _PLAIN
    for key, item in value.items():
        secret = verdicts.get(key) if type(key) is str else None
        if secret is None:
            secret = _secret_field(key)
        kind = type(item)
        if secret:
            value[key] = _redact_value(item)
        elif kind is str:
            scrubbed = _scrub_str(cast(str, item), secrets)
            if scrubbed is not item:
                value[key] = scrubbed
        elif kind in plain:
            continue
        elif kind is dict:
            _scrub_dict(cast(dict[object, object], item), secrets)
        elif kind is list:
            _scrub_list(cast(list[object], item), secrets)
        else:
            value[key] = _scrub(item, secrets)


def _scrub_list(value: list[object], secrets: tuple[str, ...]) -> None:
    plain = _PLAIN
    for index, item in enumerate(value):
        kind = type(item)
        if kind in plain:
            continue
        if kind is dict:
            _scrub_dict(cast(dict[object, object], item), secrets)
        elif kind is list:
            _scrub_list(cast(list[object], item), secrets)
        elif kind is str:
            scrubbed = _scrub_str(cast(str, item), secrets)
            if scrubbed is not item:
                value[index] = scrubbed
        else:
            value[index] = _scrub(item, secrets)


def _scrub_str(value: str, secrets: tuple[str, ...]) -> str:
    """``value`` itself when it holds no secret (the usual case, decided without a call)."""
    if "=" in value:
        return _scrub_string(value, secrets)
    for secret in secrets:
        if secret in value:
            return _scrub_string(value, secrets)
    return value


def _scrub(value: object, secrets: tuple[str, ...]) -> object:
    """A scrubbed copy of a value of another type than the decoder's (a subclass of dict, list
    or str, …): the long way."""
    if isinstance(value, dict):
        copied = dict(value)
        _scrub_dict(copied, secrets)
        return copied
    if isinstance(value, list):
        items = list(value)
        _scrub_list(items, secrets)
        return items
    if isinstance(value, str):
        return _scrub_string(str(value), secrets)
    return value


# Decoded JSON values that hold no text (exact types: a subclass goes the long way).
_PLAIN = frozenset({int, float, bool, type(None)})


# A poll scrubs every field of every instance under a few dozen distinct field names: each
# name's verdict is kept.
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
