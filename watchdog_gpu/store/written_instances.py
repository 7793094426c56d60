"""What this process last wrote to each instance row's listed columns: a poll rewrites only the
instances whose listing changed.

A steady fleet changes only a listing's two instants, so an instance whose listed values match
the digest last written gets only those. Why leaving a row alone is exact: ``docs/database.md``,
"What the Store keeps in memory, and why that is exact".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import datetime
from hashlib import blake2b
from typing import Any

Fingerprint = bytes


def fingerprint(account: str, instance_id: str, listed: list[Any]) -> Fingerprint | None:
    """The digest of an instance's listed values (None: a value JSON cannot show)."""
    # The text of ``json.dumps(..., default=_tagged)``, made faster (every listed instance is
    # fingerprinted on every poll): one encoder for good, and the top-level instants tagged
    # here rather than by a call back from the encoder (nested ones still are).
    parts: list[Any] = [account, instance_id]
    for value in listed:
        parts.append({"datetime": value.isoformat()} if type(value) is datetime else value)
    try:
        text = _ENCODE(parts)
    except (TypeError, ValueError):
        return None
    return blake2b(text.encode(), digest_size=16).digest()


def _tagged(value: object) -> object:
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    raise TypeError(type(value).__name__)


_ENCODE = json.JSONEncoder(default=_tagged).encode  # json.dumps's settings but ``default``


class WrittenInstances:
    """Instance row id → the fingerprint of what its listed columns hold (see the module)."""

    def __init__(self) -> None:
        self._rows: dict[int, Fingerprint] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def holds(self, pk: int, written: Fingerprint | None) -> bool:
        """Whether row ``pk`` already holds the values of fingerprint ``written``."""
        return written is not None and self._rows.get(pk) == written

    def remember(self, written: Mapping[int, Fingerprint | None]) -> None:
        """After the commit that wrote them: each row's new fingerprint (None: forget it)."""
        with self._lock:
            for pk, print_ in written.items():
                if print_ is None:
                    self._rows.pop(pk, None)
                else:
                    self._rows[pk] = print_

    def forget_all(self) -> None:
        """A write failed: nothing is known any more, every row is written in full next."""
        with self._lock:
            self._rows.clear()
