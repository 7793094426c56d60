"""What this process last wrote to each instance row's listed columns: a poll rewrites only the
instances whose listing changed.

Why: every poll used to rewrite every column of every listed instance (about twenty values,
three of them JSON) although a steady fleet changes only the instants of the listing
(``observed_at`` and ``last_seen``): ≈ 70–100 ms of a 1,000-instance tick (bench/README.md,
"Only the instances a poll changed"). Now an instance whose listed values are those last written
gets only those two instants.

Why leaving a row alone is exact:

- An instance's entry is the fingerprint of what was written to its row: a 128-bit BLAKE2 digest
  of the account, the instance id and the listed values as JSON text, with their types (``1``,
  ``1.0`` and ``true`` differ; an instant is its ISO text with its offset; a value JSON cannot
  show has no fingerprint and is always written). Equal fingerprints mean the same values to
  write, so the row already holds them (the account and instance id are in it: a row id SQLite
  hands out again after a prune belongs to another instance).
- The Store hands the fingerprints over only once the transaction that wrote them committed; a
  write that failed forgets every entry (:meth:`WrittenInstances.forget_all`): a rolled-back or
  partly done write cannot leave an entry the row does not hold.
- Nothing else writes these columns: the instance rows are written by recording a poll only
  (another process — ``once``, a standby — holds the database's lock or leadership only when
  this one does not run; a new process starts with no entries). A gone instance has no entry.
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
