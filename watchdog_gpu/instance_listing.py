"""A listing of an account's instances alone (the executor's verification re-listing) as the
observation the store records: complete for the instances, while the parts it did not list —
account, volumes, SSH keys — are named in ``problems``, so the store keeps what it recorded of
them (``AccountObservation``). Recorded, it ends a destroyed instance's billing and its place in
``status`` at the verification rather than at the next poll (docs/safety.md, "Period spend")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType

from watchdog_gpu.model import AccountObservation, AccountSnapshot, InstanceSnapshot

NOT_LISTED: Mapping[str, str] = MappingProxyType(
    dict.fromkeys(("account", "volumes", "ssh_keys"), "not listed: an instance listing only")
)


def instance_listing(
    provider: str, account: str, instances: Sequence[InstanceSnapshot], now: datetime
) -> AccountObservation:
    """The observation of ``account``'s complete instance listing taken at ``now``."""
    return AccountObservation(
        account=AccountSnapshot(provider, account, now),
        instances=tuple(instances),
        problems=NOT_LISTED,
    )
