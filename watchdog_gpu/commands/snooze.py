"""``watchdog-gpu snooze ID --for 2h [--reason TEXT] [--config PATH | --db PATH]``: postpone
destructive actions for one instance.

The planner neither warns about nor stops/destroys the instance until the snooze expires; its
findings are still recorded and reported. ``ID`` is ``ACCOUNT/INSTANCE_ID`` or a bare id that is
unique among the recorded instances. ``--for`` may not be longer than ``[safety] max_snooze``
(default 24h; with ``--db`` the default applies). The snooze and an audit event (``snoozed``)
are recorded; the command prints what it did and when the snooze expires.

Exit codes: 0 snoozed; 1 database failure; 2 bad usage (unknown, ambiguous or gone instance, a
duration that is not valid or too long, invalid configuration, missing database).
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from watchdog_gpu.cli import EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.common import (
    CommandError,
    Source,
    add_source_arguments,
    current_time,
    describe,
    json_time,
    opened_source,
    operator_name,
    positive_duration,
    reports_errors,
    resolve_instance,
)
from watchdog_gpu.durations import format_duration
from watchdog_gpu.model import IN_FLIGHT_ACTION_STATUSES, InstanceSnapshot, InstanceState
from watchdog_gpu.notify.render import format_clock

if TYPE_CHECKING:
    from watchdog_gpu.store import Store
    from watchdog_gpu.store.rows import ActionRow

SNOOZED = "snoozed"  # the audit event's kind


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``snooze`` to the command line."""
    parser = subparsers.add_parser(
        "snooze",
        help=summary("snooze"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument("instance", metavar="ID", help="ACCOUNT/INSTANCE_ID or a unique bare id")
    parser.add_argument(
        "--for",
        dest="duration",
        type=positive_duration,
        required=True,
        metavar="DURATION",
        help="how long, e.g. 30m, 2h, 1d (at most [safety] max_snooze)",
    )
    parser.add_argument("--reason", default="", metavar="TEXT", help="why (kept in the audit)")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_snooze)


@reports_errors
def run_snooze(args: argparse.Namespace) -> int:
    """Record the snooze and its audit event; print when it expires."""
    duration: timedelta = args.duration
    with opened_source(args) as source:
        _require_allowed(duration, source)
        store = source.store
        record = resolve_instance(store.latest_instances(include_gone=True), args.instance)
        snapshot = record.snapshot
        if snapshot.state is InstanceState.GONE:
            raise CommandError(f"instance {describe(record)} is gone: there is nothing to snooze")
        mine = (snapshot.account, snapshot.instance_id)
        now = current_time()
        until = now + duration
        earlier = [s.until for s in store.list_snoozes(now) if (s.account, s.instance_id) == mine]
        store.add_snooze(snapshot.account, snapshot.instance_id, until, now, args.reason)
        _audit(store, snapshot, now, duration, args.reason)
        # Actions being carried out: a snooze can no longer recall them.
        under_way = [
            action
            for action in store.list_actions(statuses=IN_FLIGHT_ACTION_STATUSES)
            if (action.account, action.instance_id) == mine
        ]
    print(
        f"snoozed {describe(record)} for {format_duration(duration)}: no stop or destroy "
        f"before {format_clock(until, now)} ({json_time(until.replace(microsecond=0))})"
    )
    _print_notes(max(earlier, default=None), until, under_way, now)
    return EXIT_OK


def _require_allowed(duration: timedelta, source: Source) -> None:
    maximum = source.safety.max_snooze
    if duration <= maximum:
        return
    where = "[safety] max_snooze" if source.settings is not None else "the default"
    raise CommandError(
        f"--for {format_duration(duration)} is longer than the maximum snooze of "
        f"{format_duration(maximum)} ({where}); snooze again when it expires, or protect "
        "the instance (`watchdog-gpu protect ID`)"
    )


def _audit(
    store: Store, snapshot: InstanceSnapshot, now: datetime, duration: timedelta, reason: str
) -> None:
    user = operator_name()
    until = now + duration
    store.add_audit_event(
        SNOOZED,
        now,
        account=snapshot.account,
        instance_id=snapshot.instance_id,
        message=f"snoozed for {format_duration(duration)} by {user}"
        + (f": {reason}" if reason else ""),
        data={
            "until": until.isoformat(),
            "duration": format_duration(duration),
            "reason": reason,
            "by": user,
        },
    )


def _print_notes(
    longest: datetime | None, until: datetime, under_way: list[ActionRow], now: datetime
) -> None:
    """What the new snooze does not change: a longer one already standing, actions under way."""
    if longest is not None and longest > until:
        print(f"note: an earlier snooze lasts longer, until {format_clock(longest, now)}")
    for action in under_way:
        print(
            f"note: a {action.kind.value} by rule {action.rule} is already {action.status}; "
            "a snooze does not recall an action under way"
        )
