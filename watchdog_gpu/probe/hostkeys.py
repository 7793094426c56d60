"""Host keys pinned per instance id, with accept-new semantics.

Rental marketplaces reuse IP:port pairs across customers and machines, so a known_hosts keyed by
address would raise false "host key changed" alarms (and, worse, teach users to ignore them).
The pin is therefore keyed by account + instance id: the first successful login to an instance
pins its key, a different key later is an alert and no probe, and the pin is forgotten when the
instance is gone.

:class:`HostKeyStore` is the seam; the SQLite ``Store`` satisfies it with the same three methods,
and :class:`MemoryHostKeyStore` serves tests and the simulator.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class HostKeyStore(Protocol):
    """Where pinned host keys live. Implementations must be safe to call from several threads."""

    def get_pinned_host_key(self, account: str, instance_id: str) -> tuple[str, str] | None:
        """The pinned ``(key_type, key_base64)`` of the instance, or ``None`` if none is pinned."""
        ...

    def pin_host_key(
        self, account: str, instance_id: str, key_type: str, key_base64: str, now: datetime
    ) -> None:
        """Pin ``key_type``/``key_base64`` for the instance (replacing nothing: callers pin only
        when no key is pinned)."""
        ...

    def forget_host_key(self, account: str, instance_id: str) -> None:
        """Drop the instance's pin (the instance is gone). Forgetting an unknown pin is a no-op."""
        ...


@dataclass(frozen=True, slots=True)
class PinnedHostKey:
    key_type: str
    key_base64: str
    pinned_at: datetime


class MemoryHostKeyStore:
    """A thread-safe in-memory :class:`HostKeyStore` for tests and the simulator."""

    def __init__(self) -> None:
        self._pins: dict[tuple[str, str], PinnedHostKey] = {}
        self._lock = threading.Lock()

    def get_pinned_host_key(self, account: str, instance_id: str) -> tuple[str, str] | None:
        with self._lock:
            pin = self._pins.get((account, instance_id))
        return None if pin is None else (pin.key_type, pin.key_base64)

    def pin_host_key(
        self, account: str, instance_id: str, key_type: str, key_base64: str, now: datetime
    ) -> None:
        with self._lock:
            self._pins[(account, instance_id)] = PinnedHostKey(key_type, key_base64, now)

    def forget_host_key(self, account: str, instance_id: str) -> None:
        with self._lock:
            self._pins.pop((account, instance_id), None)

    def pinned(self, account: str, instance_id: str) -> PinnedHostKey | None:
        """The full pin record (for tests that check when a key was pinned)."""
        with self._lock:
            return self._pins.get((account, instance_id))
