"""Decoding the JSON columns SQLite hands back as text, the texts a fleet repeats kept decoded.

Every instance row holds three JSON columns (per-GPU utilisation, public ports, labels), and a
tick reads every instance row twice (the probe's list of running instances, the fleet view):
thousands of ``json.loads`` calls a tick, of a handful of distinct short texts
(``[]``, ``{}``, ``[22, 8888]``…). A flat value — a scalar, or a list or object of scalars — is
kept by its text, and each read gets a copy of it (a new list or dict: a caller may change what
it read); anything nested or long is decoded every time. Same values as ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

_SCALARS = frozenset({str, int, float, bool, type(None)})
_MAX_KEPT = 4096  # distinct texts; all forgotten when full (a fleet has a few dozen)
_MAX_TEXT = 200  # characters: longer texts are not kept
_kept: dict[str, Any] = {}
_MISSING = object()


def loads(text: str) -> Any:
    """``json.loads(text)``; a flat value's text decoded once (see the module)."""
    kept = _kept.get(text, _MISSING)
    if kept is not _MISSING:
        kind = type(kept)
        return kept.copy() if kind is list or kind is dict else kept
    value = json.loads(text)
    if len(text) <= _MAX_TEXT and _flat(value):
        if len(_kept) >= _MAX_KEPT:
            _kept.clear()
        kind = type(value)
        _kept[text] = value.copy() if kind is list or kind is dict else value
    return value


def _flat(value: Any) -> bool:
    kind = type(value)
    if kind is list:
        return all(type(item) in _SCALARS for item in value)
    if kind is dict:
        return all(type(item) in _SCALARS for item in value.values())
    return kind in _SCALARS
