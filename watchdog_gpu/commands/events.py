"""``watchdog-gpu events [--since 2h|ISO] [--limit N] [--instance ID] [--json]``: the audit history.

Every decision and action the watchdog recorded, oldest first: warnings, alerts, planned,
dry-run, called, verified, unverified, failed and blocked actions, resolutions, fuse trips and
resets, snoozes and protections. Each with its rule, mode (``dry-run`` or ``enforce``), the
dollars per hour at stake and the evidence. ``--since`` takes a duration back from now (``2h``,
``7d``) or an ISO time (UTC when it has no offset); ``--limit`` keeps the most recent N (default
50, 0 = all); ``--instance`` takes ``ACCOUNT/INSTANCE_ID`` or a unique bare id (gone instances
included).

``--json`` prints one JSON object per line (JSON Lines; ``jq -s`` makes an array), with the keys
``id``, ``at`` (ISO 8601 UTC), ``kind``, ``account``, ``instance_id``, ``rule``, ``message``,
``mode`` (``"dry-run"``, ``"enforce"`` or null when the event is not about an action),
``usd_per_hour`` (number or null), ``evidence`` (object: the rule's evidence) and ``data`` (the
whole recorded object). Exit codes: 0; 1 database failure; 2 bad usage, invalid configuration or
a missing database.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from watchdog_gpu.cli import EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.common import (
    add_source_arguments,
    current_time,
    json_time,
    opened_reader,
    parse_since,
    print_lines,
    ref,
    reports_errors,
    resolve_instance,
    table,
    timestamp,
)
from watchdog_gpu.notify.render import format_rate
from watchdog_gpu.store.rows import AuditEvent
from watchdog_gpu.store.values import JsonValue

DEFAULT_LIMIT = 50
EVIDENCE_PREFIX = "evidence."
HEADERS = ("TIME", "EVENT", "INSTANCE", "RULE", "MODE", "$/H", "MESSAGE")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``events`` to the command line."""
    parser = subparsers.add_parser(
        "events",
        help=summary("events"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument("--since", metavar="WHEN", help="a duration back (2h, 7d) or an ISO time")
    parser.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"only the most recent N events (default {DEFAULT_LIMIT}; 0 = all)",
    )
    parser.add_argument("--instance", metavar="ID", help="only events of this instance")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_events)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (all) or more")
    return value


@reports_errors
def run_events(args: argparse.Namespace) -> int:
    """Print the selected events as a table or JSON Lines."""
    since = parse_since(args.since, current_time()) if args.since else None
    with opened_reader(args) as source:
        account = instance_id = None
        if args.instance is not None:
            instances = source.store.latest_instances(include_gone=True)
            snapshot = resolve_instance(instances, args.instance).snapshot
            account, instance_id = snapshot.account, snapshot.instance_id
        events = source.store.list_audit_events(
            since, args.limit or None, account=account, instance_id=instance_id
        )
    if args.json:
        for event in events:
            print(json.dumps(event_json(event), ensure_ascii=False))
        return EXIT_OK
    if not events:
        print("no events recorded" + (" in that period" if since else ""))
        return EXIT_OK
    print_lines(event_lines(events))
    return EXIT_OK


def event_json(event: AuditEvent) -> dict[str, Any]:
    """The stable JSON form of one event (see the module docstring)."""
    return {
        "id": event.id,
        "at": json_time(event.at),
        "kind": event.kind,
        "account": event.account,
        "instance_id": event.instance_id,
        "rule": event.rule,
        "message": event.message,
        "mode": mode_of(event.data),
        "usd_per_hour": usd_per_hour(event.data),
        "evidence": evidence(event.data),
        "data": dict(event.data),
    }


def event_lines(events: list[AuditEvent]) -> list[str]:
    """The table; an event with evidence gets an indented ``evidence:`` line under it."""
    rows = [_row(event) for event in events]
    header, *body = table(HEADERS, rows)
    lines = [header]
    for event, line in zip(events, body, strict=True):
        lines.append(line)
        found = evidence(event.data)
        if found:
            shown = ", ".join(f"{key}={_value(value)}" for key, value in found.items())
            lines.append(f"    evidence: {shown}")
    return lines


def _row(event: AuditEvent) -> list[str]:
    instance = ""
    if event.account and event.instance_id:
        instance = ref(event.account, event.instance_id)
    elif event.account:
        instance = event.account
    rate = usd_per_hour(event.data)
    return [
        timestamp(event.at),
        event.kind,
        instance,
        event.rule or "",
        mode_of(event.data) or "",
        format_rate(rate) if rate is not None else "",
        " ".join(event.message.split()),
    ]


def mode_of(data: Mapping[str, JsonValue]) -> str | None:
    """``dry-run`` / ``enforce`` for events about an action, else None."""
    dry_run = data.get("dry_run")
    if not isinstance(dry_run, bool):
        return None
    return "dry-run" if dry_run else "enforce"


def usd_per_hour(data: Mapping[str, JsonValue]) -> float | None:
    value = data.get("usd_per_hour")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def evidence(data: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The rule's evidence recorded with a decision (``evidence.*`` keys, prefix dropped)."""
    return {
        key.removeprefix(EVIDENCE_PREFIX): value
        for key, value in data.items()
        if key.startswith(EVIDENCE_PREFIX)
    }


def _value(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:57] + "..."
    return json.dumps(value)
