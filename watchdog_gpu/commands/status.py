"""``watchdog-gpu status [--config PATH | --db PATH] [--json]``: the fleet as recorded.

The database it read and whether the watchdog enforces or monitors (``[watchdog] mode`` and the
rules whose own mode differs; ``unknown`` with ``--db`` alone), then two tables. Accounts:
provider, balance, spend rate in $/h (the provider's figure, else the sum of what its instances
bill), runway (balance ÷ spend rate) and the last poll (ok or the error kind, and how long ago).
Instances: ``account/id``, name, state and since when, what it bills per hour now, GPU activity
from the recorded samples (``busy``, ``idle 42 min`` — the idle rule's own clock,
``rules/idle_clock.current_idle``: since its episode start, with the same blind-time and
``max_sample_gap`` semantics, so a long SSH gap restarts it here too; ``idle ≥ 2 h`` when the
clock starts at arming or at the window's first sample —, ``unknown``, ``no samples``, plus a
failing probe's status and how the host is probed: ``[stream]`` or ``[burst]``), actions pending
in the outbox, stops/destroys due (``destroy due 22:30 UTC (idle_gpu)``, when the planner will
act: ``plan.action_due``; none once the action — in monitor mode its dry run; with ``--db``
alone, either — is recorded),
snoozes and protections (the planner's own check, configuration included when one was read).
Then the fuse, and the protections kept in the database. Every line fits the terminal's width
(``$COLUMNS`` when set): a narrow one gets names cut short with snoozes and protections in one
``NEXT`` column with the actions, then no names, then wrapped cells; a pipe gets whole lines
unless ``$COLUMNS`` is set.

The database is the one the daemon resolves from the same configuration: ``database_url``, else
``watchdog-gpu.db`` in ``$STATE_DIRECTORY``, in ``/var/lib/watchdog-gpu`` for a configuration in
``/etc/watchdog-gpu`` (the system unit's directories), or in ``~/.local/state/watchdog-gpu``. It
reads only the database: with ``--db PATH`` no configuration file is needed (the rules' defaults
then decide the sample window and the idle threshold); an older schema is migrated first. A
database that holds records newer than this machine's clock (an accelerated demo or a simulation
wrote it) is shown as of its latest record, and says so. A new database prints ``no accounts
recorded yet``; a missing one is an error (exit 2), never created.

``--json`` prints one object with stable keys::

    {"as_of": ISO, "clock_note": str|null, "database": str,
     "mode": {"watchdog": "monitor"|"enforce", "rules": {rule: mode that differs}} | null,
     "fuse": {"latched": bool, "held_actions": int},
     "leader": {"node": str, "epoch": int, "since": str, "renewed_at": str} | null,
     "accounts": [{"name", "provider", "balance_usd", "spend_usd_per_hour",
                   "spend_rate_source": "provider"|"instances"|null, "runway_hours",
                   "last_poll": "ok"|"error"|"never", "last_poll_ok_at", "last_poll_error_kind",
                   "last_poll_error_at", "last_poll_error_message",
                   "gpu_evidence": str|null (what its GPU evidence can prove; null without a
                   configuration listing the account)}],
     "instances": [{"account", "instance_id", "name", "provider", "state", "raw_state",
                    "state_since", "usd_per_hour",
                    "gpu": {"status": "busy"|"idle"|"unknown"|"no_samples"|"not_running",
                            "idle_since", "idle_seconds", "idle_at_least", "last_sample_at",
                            "last_busy_at", "last_probe_status", "last_probe_at",
                            "probe_mode": "stream"|"burst"|null},
                    "pending_actions": [{"kind", "rule", "status", "dry_run", "created_at"}],
                    "due": [{"rule", "action", "due_at", "summary"}],
                    "snoozed_until", "protected": reason|null}],
     "protections": [{"kind": "id"|"name"|"account", "value", "account", "reason",
                      "created_at"}]}

Times are ISO 8601 UTC strings (``...Z``) or null; money in US dollars (null = unknown, never
0). Exit codes: 0; 1 database failure; 2 invalid configuration or missing database.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from watchdog_gpu.cli import EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.colour import colour_enabled, paint
from watchdog_gpu.commands.common import (
    add_source_arguments,
    current_time,
    fitted,
    json_time,
    opened_reader,
    output_width,
    print_json,
    print_lines,
    ref,
    reports_errors,
    table,
    timestamp,
)
from watchdog_gpu.commands.status_collect import AccountStatus, FleetStatus, InstanceStatus, collect
from watchdog_gpu.fleet import AccountView, ActionRecord, Protection
from watchdog_gpu.model import InstanceState
from watchdog_gpu.notify.render import format_clock, format_duration, format_rate, format_usd
from watchdog_gpu.store.rows import DEFAULT_LEADER_LEASE_SECONDS, Leader


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status`` to the command line."""
    parser = subparsers.add_parser(
        "status",
        help=summary("status"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument("--json", action="store_true", help="one JSON object (stable keys)")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_status)


@reports_errors
def run_status(args: argparse.Namespace) -> int:
    """Print the tables (or the JSON object)."""
    with opened_reader(args) as source:
        status = collect(source, current_time())
    if args.json:
        print_json(status_json(status))
    else:
        lines = status_lines(
            status, colour=colour_enabled(sys.stdout), width=output_width(sys.stdout)
        )
        print_lines(lines)
    return EXIT_OK


# -- text -------------------------------------------------------------------------------------


# The GPU column on a terminal: busy is safe, idle is what the rules act on, unknown (a failed
# probe, unreadable samples) is neither and needs a look.
_GPU_COLOURS = {"busy": "green", "idle": "yellow", "unknown": "red", "no_samples": "red"}


def status_lines(
    status: FleetStatus, *, colour: bool = False, width: int | None = None
) -> list[str]:
    """The human tables (``colour``: the GPU state coloured, for a terminal; ``width``: every
    line fits in that many columns — see :func:`_instance_table`)."""
    if not status.accounts:
        return fitted(
            [f"no accounts recorded yet (database {status.database})", _mode_line(status)], width
        )
    now = status.as_of
    lines = [f"as of {timestamp(now)}; database {status.database}", _mode_line(status)]
    if status.clock_note:
        lines.append(f"note: {status.clock_note}")
    lines.append(_fuse_line(status))
    if status.leader is not None:
        lines.append(_leader_line(status.leader, now))
    lines = fitted(lines, width)
    lines.append("")
    lines += table(
        ("ACCOUNT", "PROVIDER", "BALANCE", "SPEND", "RUNWAY", "LAST POLL"),
        [_account_row(account, now) for account in status.accounts],
        width=width,
    )
    lines += fitted(
        (
            f"  {account.view.account} GPU evidence: {account.gpu_evidence}"
            for account in status.accounts
            if account.gpu_evidence is not None
        ),
        width,
    )
    lines.append("")
    if status.instances:
        lines += _instance_table(status.instances, now, colour=colour, width=width)
    else:
        lines.append("no instances")
    if status.protections:
        lines.append("")
        lines += fitted(
            [
                "protections (database; `watchdog-gpu unprotect` removes them):",
                *(f"  {_protection_text(p)}" for p in status.protections),
            ],
            width,
        )
    return lines


# How long a name may be in the narrower layouts before it is cut with an ellipsis.
_SHORT_NAME = 16


def _instance_table(
    instances: Sequence[InstanceStatus], now: datetime, *, colour: bool, width: int | None
) -> list[str]:
    """The instances table, in the first layout whose lines fit in ``width``: every column;
    then names cut to 16 characters with snoozes and protections moved into one ``NEXT``
    column with the pending and due actions; then without names. The last one wraps its
    widest cells if it still does not fit. The essential facts — instance, state and since
    when, $/h, GPU activity (idle since), next action — are in every layout."""

    def painter(headers: Sequence[str]) -> Callable[[int, int, str], str]:
        gpu = headers.index("GPU")

        def gpu_colour(row: int, column: int, text: str) -> str:
            shown = colour and column == gpu
            return paint(text, _GPU_COLOURS.get(instances[row].gpu.status), shown)

        return gpu_colour

    headers: tuple[str, ...] = (
        "INSTANCE",
        "NAME",
        "STATE",
        "$/H",
        "GPU",
        "PENDING",
        "SNOOZED",
        "PROTECTED",
    )
    rows = [_instance_row(instance, now) for instance in instances]
    if width is None or max(len(line) for line in table(headers, rows)) <= width:
        return table(headers, rows, paint=painter(headers))
    rows = [_compact_row(instance, now) for instance in instances]
    headers = ("INSTANCE", "NAME", "STATE", "$/H", "GPU", "NEXT")
    if max(len(line) for line in table(headers, rows)) <= width:
        return table(headers, rows, paint=painter(headers))
    headers = ("INSTANCE", "STATE", "$/H", "GPU", "NEXT")
    rows = [row[:1] + row[2:] for row in rows]
    return table(headers, rows, paint=painter(headers), width=width)


def _compact_row(instance: InstanceStatus, now: datetime) -> list[str]:
    """:func:`_instance_row` in six columns: the name cut short, then one ``NEXT`` cell with
    the pending and due actions, the snooze and the protection."""
    full = _instance_row(instance, now)
    name = full[1] if len(full[1]) <= _SHORT_NAME else full[1][: _SHORT_NAME - 1] + "…"
    following = [text for text in _next_texts(instance, now) if text]
    return [full[0], name, full[2], full[3], full[4], "; ".join(following) or "-"]


def _next_texts(instance: InstanceStatus, now: datetime) -> list[str]:
    snoozed = instance.snoozed_until
    return [
        *_pending_texts(instance, now),
        f"snoozed until {format_clock(snoozed, now)}" if snoozed else "",
        f"protected: {instance.protected}" if instance.protected else "",
    ]


def _mode_line(status: FleetStatus) -> str:
    summary = status.mode
    if summary is None:
        return "mode: unknown (no configuration read: the mode is in the configuration file)"
    text = (
        "mode: enforce (stops and destroys what the rules decide)"
        if summary.mode == "enforce"
        else "mode: monitor (decides, records and notifies; stops and destroys nothing)"
    )
    if summary.exceptions:
        text += "; except " + ", ".join(f"{rule}: {mode}" for rule, mode in summary.exceptions)
    return text


def _fuse_line(status: FleetStatus) -> str:
    if not status.latched:
        return "fuse: ok"
    return (
        f"fuse: TRIPPED, {status.held_actions} action(s) held; ordinary rules act on nothing "
        "until `watchdog-gpu fuse reset` (see `watchdog-gpu fuse status`)"
    )


def _leader_line(leader: Leader, now: datetime) -> str:
    silent = now - leader.renewed_at
    # A live leader renews every 5 s at most: a heartbeat older than the default lease means a
    # frozen or cut-off leader that a standby is about to replace (docs/postgresql.md).
    warning = (
        "; silent longer than a lease: frozen or cut off?"
        if silent > timedelta(seconds=DEFAULT_LEADER_LEASE_SECONDS)
        else ""
    )
    return (
        f"leader: node {leader.node} since {timestamp(leader.since)} (epoch {leader.epoch}, "
        f"last heartbeat {_heartbeat_age(silent)}{warning})"
    )


def _heartbeat_age(elapsed: timedelta) -> str:
    if elapsed < timedelta(minutes=1):
        return f"{max(0, int(elapsed.total_seconds()))} s ago"
    return f"{format_duration(elapsed)} ago"


def _ago(moment: datetime, now: datetime) -> str:
    elapsed = now - moment
    return "just now" if elapsed < timedelta(minutes=1) else f"{format_duration(elapsed)} ago"


def _account_row(account: AccountStatus, now: datetime) -> list[str]:
    snapshot = account.view.latest
    balance = snapshot.balance_usd if snapshot is not None else None
    rate = account.spend_usd_per_hour
    if account.runway_hours is not None and account.runway_hours <= 0:
        runway = "none left"
    elif account.runway_hours is not None:
        runway = format_duration(timedelta(hours=account.runway_hours))
    else:
        runway = "-" if rate == 0 else "unknown"
    return [
        account.view.account,
        account.view.provider,
        format_usd(balance) if balance is not None else "unknown",
        format_rate(rate),
        runway,
        _poll_text(account.view, now),
    ]


def _poll_text(view: AccountView, now: datetime) -> str:
    if view.last_poll_error_kind is not None and view.last_poll_error_at is not None:
        return f"ERROR {view.last_poll_error_kind} {_ago(view.last_poll_error_at, now)}"
    if view.last_poll_ok_at is not None:
        return f"ok {_ago(view.last_poll_ok_at, now)}"
    return "never"


def _instance_row(instance: InstanceStatus, now: datetime) -> list[str]:
    latest = instance.view.latest
    state = latest.state.value
    if latest.state is InstanceState.UNKNOWN:
        state += f" ({latest.raw_state})"
    snoozed = instance.snoozed_until
    return [
        ref(latest.account, latest.instance_id),
        latest.name,
        f"{state} since {format_clock(instance.since, now)}",
        format_rate(instance.usd_per_hour),
        instance.gpu.text,
        "; ".join(_pending_texts(instance, now)) or "-",
        f"until {format_clock(snoozed, now)}" if snoozed else "-",
        instance.protected or "-",
    ]


def _pending_texts(instance: InstanceStatus, now: datetime) -> list[str]:
    """The instance's actions in the outbox, then the stops/destroys due and when."""
    pending = [
        f"{a.kind.value} {a.status}" + (" (dry run)" if a.dry_run else "") for a in instance.pending
    ]
    pending += [
        f"{f.action.value} due {format_clock(f.due_at, now)} ({f.rule})" for f in instance.due
    ]
    return pending


def _protection_text(protection: Protection) -> str:
    scope = f" in account {protection.account}" if protection.account else ""
    reason = f" ({protection.reason})" if protection.reason else ""
    return f"{protection.kind.value} {protection.value}{scope}{reason}"


# -- JSON -------------------------------------------------------------------------------------


def status_json(status: FleetStatus) -> dict[str, Any]:
    """The stable JSON object (see the module docstring)."""
    return {
        "as_of": json_time(status.as_of),
        "clock_note": status.clock_note,
        "database": status.database,
        "mode": None
        if status.mode is None
        else {"watchdog": status.mode.mode, "rules": dict(status.mode.exceptions)},
        "fuse": {"latched": status.latched, "held_actions": status.held_actions},
        "leader": None
        if status.leader is None
        else {
            "node": status.leader.node,
            "epoch": status.leader.epoch,
            "since": json_time(status.leader.since),
            "renewed_at": json_time(status.leader.renewed_at),
        },
        "accounts": [_account_json(account) for account in status.accounts],
        "instances": [_instance_json(instance) for instance in status.instances],
        "protections": [
            {
                "kind": p.kind.value,
                "value": p.value,
                "account": p.account,
                "reason": p.reason,
                "created_at": json_time(p.created_at),
            }
            for p in status.protections
        ],
    }


def _account_json(account: AccountStatus) -> dict[str, Any]:
    view = account.view
    snapshot = view.latest
    if view.last_poll_error_kind is not None:
        last_poll = "error"
    else:
        last_poll = "ok" if view.last_poll_ok_at is not None else "never"
    return {
        "name": view.account,
        "provider": view.provider,
        "balance_usd": snapshot.balance_usd if snapshot is not None else None,
        "spend_usd_per_hour": account.spend_usd_per_hour,
        "spend_rate_source": account.spend_source,
        "runway_hours": account.runway_hours,
        "last_poll": last_poll,
        "last_poll_ok_at": json_time(view.last_poll_ok_at),
        "last_poll_error_kind": view.last_poll_error_kind,
        "last_poll_error_at": json_time(view.last_poll_error_at),
        "last_poll_error_message": account.error_message if last_poll == "error" else None,
        "gpu_evidence": account.gpu_evidence,
    }


def _instance_json(instance: InstanceStatus) -> dict[str, Any]:
    latest = instance.view.latest
    return {
        "account": latest.account,
        "instance_id": latest.instance_id,
        "name": latest.name,
        "provider": latest.provider,
        "state": latest.state.value,
        "raw_state": latest.raw_state,
        "state_since": json_time(instance.since),
        "usd_per_hour": instance.usd_per_hour,
        "gpu": instance.gpu.as_json(),
        "pending_actions": [_action_json(action) for action in instance.pending],
        "due": [
            {
                "rule": f.rule,
                "action": f.action.value,
                "due_at": json_time(f.due_at),
                "summary": f.summary,
            }
            for f in instance.due
        ],
        "snoozed_until": json_time(instance.snoozed_until),
        "protected": instance.protected,
    }


def _action_json(action: ActionRecord) -> Mapping[str, Any]:
    return {
        "kind": action.kind.value,
        "rule": action.rule,
        "status": action.status,
        "dry_run": action.dry_run,
        "created_at": json_time(action.created_at),
    }
