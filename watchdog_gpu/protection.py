"""Which instances are protected from the planner's actions: by the ``[safety]`` configuration
(ids, name globs, accounts) or by the protections kept in the database (``watchdog-gpu protect``).

Pure, like the planner it serves: it never reads the clock, the database or a provider.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from watchdog_gpu.fleet import Protection, ProtectionKind
from watchdog_gpu.model import InstanceSnapshot

if TYPE_CHECKING:  # pydantic models: ≈ 0.3 s to build, which `status --db` does without
    from watchdog_gpu.safety import SafetyConfig


class ProtectionSettings(Protocol):
    """The configured protections (the planner's ``PlanContext`` carries them)."""

    @property
    def safety(self) -> SafetyConfig: ...

    @property
    def protected_accounts(self) -> frozenset[str]: ...


def protection_for(
    snapshot: InstanceSnapshot,
    protections: Iterable[Protection],
    context: ProtectionSettings,
) -> str | None:
    """Why ``snapshot`` is protected (a human-readable reason), or None."""
    safety = context.safety
    if (
        snapshot.account in context.protected_accounts
        or snapshot.account in safety.protect_accounts
    ):
        return f"account {snapshot.account} is protected"
    for entry in safety.protect_ids:
        if entry in (snapshot.instance_id, f"{snapshot.account}/{snapshot.instance_id}"):
            return f"id {entry} is protected"
    for pattern in safety.protect_names:
        if _glob_matches(pattern, (snapshot.name, *snapshot.labels.values())):
            return f"name matches protected pattern {pattern!r}"
    return recorded_protection(snapshot, protections)


def recorded_protection(
    snapshot: InstanceSnapshot, protections: Iterable[Protection]
) -> str | None:
    """Why ``snapshot`` is protected by one of the ``protections`` kept in the database
    (``watchdog-gpu protect``), or None; the configured ones are :func:`protection_for`'s."""
    names = (snapshot.name, *snapshot.labels.values())
    for protection in protections:
        if protection.account is not None and protection.account != snapshot.account:
            continue
        if protection.kind is ProtectionKind.ACCOUNT and protection.value == snapshot.account:
            return f"account {snapshot.account} is protected"
        if (
            protection.kind is ProtectionKind.INSTANCE_ID
            and protection.value == snapshot.instance_id
        ):
            return f"instance {snapshot.ref.key} is protected"
        if protection.kind is ProtectionKind.NAME_GLOB and _glob_matches(protection.value, names):
            return f"name matches protected pattern {protection.value!r}"
    return None


def _glob_matches(pattern: str, names: Iterable[str]) -> bool:
    # Case-insensitive: "*keep*" should protect "KEEP-me" too; erring towards protection is safe.
    # A pattern that matches the empty name ("*") protects an unnamed instance too.
    lowered = pattern.lower()
    return any(fnmatch.fnmatchcase((name or "").lower(), lowered) for name in names)


def glob_protects_everything(pattern: str) -> bool:
    """Whether the name glob ``pattern`` protects every instance (it matches the empty name)."""
    return _glob_matches(pattern, ("",))
