"""``watchdog-gpu protect ID | --name GLOB | --account NAME [--reason TEXT]`` and
``watchdog-gpu unprotect ID | --name GLOB | --account NAME``: protections kept in the database.

No rule stops or destroys a protected instance; it is still watched and reported. ``ID`` is
``ACCOUNT/INSTANCE_ID`` or a bare id unique among the recorded instances (the protection is for
that instance of that account); ``--name`` a glob matched case-insensitively against instance
names and label values (``"*keep*"``); ``--account`` an account name. Each change is recorded
with an audit event (``protection_added`` / ``protection_removed``).

Protections written in the configuration (``[safety] protect_ids``, ``protect_names``,
``protect_accounts`` and an account's ``protect = true``) are separate: they cannot be removed
here, only by editing the file.

Exit codes: 0 done (also when the protection existed already); 1 ``unprotect`` of something not
protected in the database (the message says when the configuration protects it), or a database
failure; 2 bad usage (unknown, ambiguous or gone instance, unknown account, invalid
configuration, missing database).
"""

from __future__ import annotations

import argparse
import fnmatch
from dataclasses import dataclass

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.common import (
    CommandError,
    Source,
    add_source_arguments,
    current_time,
    describe,
    opened_source,
    operator_name,
    ref,
    reports_errors,
    resolve_instance,
)
from watchdog_gpu.config import Settings
from watchdog_gpu.fleet import Protection, ProtectionKind
from watchdog_gpu.model import InstanceState

PROTECTION_ADDED = "protection_added"
PROTECTION_REMOVED = "protection_removed"

UNPROTECT_DESCRIPTION = (
    "Removes a protection added with `watchdog-gpu protect` (the same ID, --name GLOB or "
    "--account NAME it was added with); the rules may act on the instance again, after their "
    "usual warning. Recorded with a `protection_removed` audit event. Protections written in the "
    "configuration cannot be removed here, only by editing the file."
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``protect`` and ``unprotect`` to the command line."""
    protect = subparsers.add_parser(
        "protect", help=summary("protect"), description=doc_paragraph(__doc__)
    )
    _add_target(protect)
    protect.add_argument("--reason", default="", metavar="TEXT", help="why (kept in the audit)")
    add_source_arguments(protect)
    protect.set_defaults(handler=run_protect)
    unprotect = subparsers.add_parser(
        "unprotect", help=summary("unprotect"), description=UNPROTECT_DESCRIPTION
    )
    _add_target(unprotect)
    add_source_arguments(unprotect)
    unprotect.set_defaults(handler=run_unprotect)


def _add_target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "instance", nargs="?", metavar="ID", help="ACCOUNT/INSTANCE_ID or a unique bare id"
    )
    target.add_argument("--name", metavar="GLOB", help='instance name/label glob, e.g. "*keep*"')
    target.add_argument("--account", metavar="NAME", help="every instance of this account")


@dataclass(frozen=True, slots=True)
class Target:
    """What a protection is for, as the store keeps it, and how to name it to a human."""

    kind: ProtectionKind
    value: str
    account: str | None
    label: str

    @property
    def audit_data(self) -> dict[str, str | None]:
        return {"kind": self.kind.value, "value": self.value, "account": self.account}


@reports_errors
def run_protect(args: argparse.Namespace) -> int:
    """Add the protection (once) and its audit event."""
    with opened_source(args) as source:
        target = _protect_target(args, source)
        now = current_time()
        added = source.store.add_protection(
            target.kind, target.value, now, account=target.account, reason=args.reason
        )
        if added:
            user = operator_name()
            source.store.add_audit_event(
                PROTECTION_ADDED,
                now,
                account=target.account or _account_of(target),
                instance_id=target.value if target.kind is ProtectionKind.INSTANCE_ID else None,
                message=f"{target.label} protected by {user}"
                + (f": {args.reason}" if args.reason else ""),
                data={**target.audit_data, "reason": args.reason, "by": user},
            )
        matching = _matching_instances(source, target)
    print(f"protected {target.label}" if added else f"{target.label} was protected already")
    if target.kind is not ProtectionKind.INSTANCE_ID:
        names = ", ".join(matching) if matching else "none right now"
        print(f"recorded instances it covers: {names}")
    print("no rule will stop or destroy it; it is still watched and reported")
    in_config = _configured(source.settings, target)
    if in_config:
        print(f"note: the configuration protects it too ({in_config})")
    return EXIT_OK


@reports_errors
def run_unprotect(args: argparse.Namespace) -> int:
    """Remove the protection and record the audit event; 1 when there was none."""
    with opened_source(args) as source:
        target = _unprotect_target(args, source)
        removed = source.store.remove_protection(target.kind, target.value, account=target.account)
        if removed:
            user = operator_name()
            source.store.add_audit_event(
                PROTECTION_REMOVED,
                current_time(),
                account=target.account or _account_of(target),
                instance_id=target.value if target.kind is ProtectionKind.INSTANCE_ID else None,
                message=f"protection of {target.label} removed by {user}",
                data={**target.audit_data, "by": user},
            )
    in_config = _configured(source.settings, target)
    if not removed:
        print(f"{target.label} is not protected in the database")
        if in_config:
            print(
                f"it is protected by the configuration ({in_config}); "
                "remove it there: the command line cannot"
            )
        elif source.settings is None:
            print("(with --db the configuration's protections are not visible)")
        return EXIT_FAILURE
    print(f"removed the protection of {target.label}")
    if in_config:
        print(f"note: the configuration still protects it ({in_config})")
    return EXIT_OK


# -- targets ----------------------------------------------------------------------------------


def _protect_target(args: argparse.Namespace, source: Source) -> Target:
    if args.instance is not None:
        record = resolve_instance(source.store.latest_instances(include_gone=True), args.instance)
        if record.snapshot.state is InstanceState.GONE:
            raise CommandError(f"instance {describe(record)} is gone: there is nothing to protect")
        snapshot = record.snapshot
        return Target(
            ProtectionKind.INSTANCE_ID,
            snapshot.instance_id,
            snapshot.account,
            f"instance {describe(record)}",
        )
    if args.name is not None:
        return _name_target(args.name)
    _require_known_account(args.account, source)
    return Target(ProtectionKind.ACCOUNT, args.account, None, f"account {args.account}")


def _unprotect_target(args: argparse.Namespace, source: Source) -> Target:
    """The stored protection to remove. An id is looked up among the protections themselves
    (the instance may be gone by now, or never have been recorded)."""
    if args.name is not None:
        return _name_target(args.name)
    if args.account is not None:
        return Target(ProtectionKind.ACCOUNT, args.account, None, f"account {args.account}")
    return _stored_id_target(args.instance.strip(), source)


def _stored_id_target(text: str, source: Source) -> Target:
    """The stored protection of instance ``text`` (``ID`` or ``ACCOUNT/ID``); one that is not
    stored when none is (removing it then says so)."""
    account, slash, instance_id = text.partition("/")
    wanted = instance_id if slash else text
    in_account = account if slash else None
    candidates = [
        protection
        for protection in source.store.list_protections()
        if protection.kind is ProtectionKind.INSTANCE_ID
        and protection.value == wanted
        and in_account in (None, protection.account)
    ]
    if len(candidates) > 1:
        raise CommandError(
            f"instance id {wanted!r} is protected in {len(candidates)} accounts; "
            "write ACCOUNT/INSTANCE_ID, one of:",
            details=[_protection_label(protection) for protection in candidates],
        )
    if candidates:
        chosen = candidates[0]
        return Target(chosen.kind, chosen.value, chosen.account, _instance_label(chosen))
    return Target(ProtectionKind.INSTANCE_ID, wanted, in_account, f"instance {text}")


def _name_target(glob: str) -> Target:
    if not glob.strip():
        raise CommandError("--name: the glob is empty")
    return Target(ProtectionKind.NAME_GLOB, glob, None, f"names matching {glob!r}")


def _require_known_account(name: str, source: Source) -> None:
    recorded = {record.view.account for record in source.store.latest_accounts()}
    configured = {a.name for a in source.settings.accounts} if source.settings else set()
    known = sorted(recorded | configured)
    if name not in known:
        raise CommandError(
            f"unknown account {name!r}",
            details=[f"known accounts: {', '.join(known)}" if known else "no accounts known yet"],
        )


def _account_of(target: Target) -> str | None:
    return target.value if target.kind is ProtectionKind.ACCOUNT else None


def _instance_label(protection: Protection) -> str:
    where = ref(protection.account, protection.value) if protection.account else protection.value
    return f"instance {where}"


def _protection_label(protection: Protection) -> str:
    return _instance_label(protection).removeprefix("instance ")


def _matching_instances(source: Source, target: Target) -> list[str]:
    """The present recorded instances a name or account protection covers."""
    found = []
    for record in source.store.latest_instances():
        snapshot = record.snapshot
        if target.kind is ProtectionKind.ACCOUNT:
            hit = snapshot.account == target.value
        else:
            names = (snapshot.name, *snapshot.labels.values())
            # The planner's matching: case-insensitive (protection._glob_matches).
            hit = any(
                fnmatch.fnmatchcase(name.lower(), target.value.lower()) for name in names if name
            )
        if hit:
            found.append(describe(record))
    return found


def _configured(settings: Settings | None, target: Target) -> str:
    """Where the configuration protects ``target`` (empty when it does not, or is unknown)."""
    if settings is None:
        return ""
    if target.kind is ProtectionKind.ACCOUNT:
        return _configured_account(settings, target.value)
    if target.kind is ProtectionKind.NAME_GLOB:
        return "[safety] protect_names" if target.value in settings.safety.protect_names else ""
    return _configured_instance(settings, target)


def _configured_account(settings: Settings, account: str) -> str:
    if account in settings.safety.protect_accounts:
        return "[safety] protect_accounts"
    if any(a.name == account and a.protect for a in settings.accounts):
        return f"[[accounts]] {account}: protect = true"
    return ""


def _configured_instance(settings: Settings, target: Target) -> str:
    safety = settings.safety
    if target.account is not None and target.account in safety.protect_accounts:
        return "[safety] protect_accounts"
    for entry in safety.protect_ids:
        account, slash, instance_id = entry.partition("/")
        same_id = (instance_id if slash else entry) == target.value
        if same_id and (not slash or target.account in (None, account)):
            return "[safety] protect_ids"
    return ""
