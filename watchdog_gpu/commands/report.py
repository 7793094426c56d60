"""``watchdog-gpu report [--since 7d] [--by account|instance|day|rule] [--json|--csv]``: spend.

Spend of the window by provider and account (``--by account``, the default), by instance and
volume (``--by instance``) or by UTC day (``--by day``), read from the recorded ledger through
its one definition (``watchdog_gpu/spend.py``: each instance's state spans and billing anchor,
each volume's rate runs). ``USD`` is the total; ``ESTIMATED`` the part of it billed after the
last listing (an outage, or before the first sighting) at the last known rate; ``LISTED`` the
rest; ``UNKNOWN H`` the hours billed at an unknown rate (not in ``USD``: unknown is not $0).
Then every stop/destroy recorded in the window (``--by rule`` shows only these): its rule, when it
was decided, its outcome, the $/h the instance billed at that moment (its recorded span; in the
JSON and CSV) and the rate it stopped billing (``$/H STOP``: that rate less what the next
recorded span bills, e.g. a stopped instance's disk). ``EST. SAVING`` is that stopped rate times
the time from the provider's acceptance of the call (where the ledger's bill ends; else the
decision) to the end of the window, for actions verified done — an estimate, not a bill. Each
row and the total also split the GPU-hours and dollars billed while the GPUs were idle (the idle
rule's clock ran), blind (not observed: unreachable, no probe, not judged) and busy
(a GPU worked), as each evaluation recorded it, and the dollars billed without a GPU (a stopped
disk, a volume); the four add up to the spend. Time without a record is blind, never idle.

The window ends at ``--until`` (a duration back or an ISO time; default: the database's latest
record — the last poll —, so a stopped daemon's or a simulation's database is not extrapolated)
and starts ``--since`` before it (a duration, default 7d, or an ISO time; UTC when it has no
offset). The database is chosen as ``status`` chooses it. ``--json`` prints one object (times ISO
8601 UTC, money in US dollars); ``--csv`` the table as CSV: one header row, ISO 8601 times, plain
numbers (no ``$`` or units). Exit codes: 0; 1 database failure; 2 bad usage or a missing database.
The daemon pushes a short version of this report daily or weekly when ``[notify.digest]`` is set.
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import datetime, timedelta
from typing import Any

from watchdog_gpu.activity import ActivityFigure
from watchdog_gpu.cli import EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.common import (
    CommandError,
    ReadSource,
    add_source_arguments,
    current_time,
    json_time,
    opened_reader,
    parse_since,
    print_json,
    print_lines,
    ref,
    reports_errors,
    table,
)
from watchdog_gpu.model import Activity
from watchdog_gpu.notify.render import format_rate, format_usd
from watchdog_gpu.spend import SECONDS_PER_HOUR, SpendFigure
from watchdog_gpu.spend_report import GROUPINGS, ActionLine, Report, SpendRow, build_report
from watchdog_gpu.store import Store

DEFAULT_SINCE = "7d"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the command line."""
    parser = subparsers.add_parser(
        "report",
        help=summary("report"),
        description=doc_paragraph(__doc__),
        epilog=doc_paragraph(__doc__, 2),
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        default=DEFAULT_SINCE,
        help=f"window start: a duration before its end (2h, 7d) or an ISO time (default "
        f"{DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--until",
        metavar="WHEN",
        help="window end: a duration back from now or an ISO time (default: the latest record)",
    )
    parser.add_argument(
        "--by", choices=GROUPINGS, default="account", help="rows per (default account)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="one JSON object")
    output.add_argument("--csv", action="store_true", help="the table as CSV (one header row)")
    add_source_arguments(parser)
    parser.set_defaults(handler=run_report)


@reports_errors
def run_report(args: argparse.Namespace) -> int:
    """Print the report as a table, one JSON object or CSV."""
    now = current_time()
    until = parse_when(args.until, now, "--until") if args.until else None
    with opened_reader(args) as source:
        end = until or _latest_record(source) or now
        start = parse_when(args.since, end, "--since")
        if start >= end:
            raise CommandError(
                f"--since: the window is empty ({json_time(start)} is not before {json_time(end)})"
            )
        report = collect(source.store, start, end, args.by)
    if args.json:
        print_json(report_json(report))
    elif args.csv:
        write_csv(report, sys.stdout)
    else:
        print_lines(report_lines(report))
    return EXIT_OK


def parse_when(text: str, now: datetime, option: str) -> datetime:
    """``parse_since`` with the option's name in its error."""
    try:
        return parse_since(text, now)
    except CommandError as error:
        raise CommandError(error.message.replace("--since", option, 1)) from None


def _latest_record(source: ReadSource) -> datetime | None:
    store = source.store
    moments = [t for t in (store.latest_seen(),) if t is not None]
    for record in store.latest_accounts():
        view = record.view
        moments += [t for t in (view.last_poll_ok_at, view.last_poll_error_at) if t is not None]
    return max(moments, default=None)


def collect(store: Store, start: datetime, end: datetime, by: str) -> Report:
    """The report of ``[start, end]`` from the recorded ledger and actions (``watchdog-gpu
    demo`` prints its total beside the simulated providers' bill)."""
    view = store.load_fleet_view(end, timedelta(0), start, activity=True)
    actions = [row.to_record() for row in store.list_actions(since=start)]
    return build_report(view, actions, start, end, by)


# -- output -----------------------------------------------------------------------------------

SPEND_COLUMNS = ("usd", "listed_usd", "estimated_usd", "unknown_hours")
# The activity split of each row (spend_report.py, activity.py), in the JSON and the CSV.
ACTIVITY_COLUMNS = (
    "idle_gpu_hours",
    "idle_usd",
    "blind_gpu_hours",
    "blind_usd",
    "busy_gpu_hours",
    "busy_usd",
    "no_gpu_usd",
)
FIGURE_COLUMNS = SPEND_COLUMNS + ACTIVITY_COLUMNS
# Text width: the tables narrow and wrap their widest cells beyond it.
TEXT_WIDTH = 100


def _figures(spent: SpendFigure, split: ActivityFigure) -> dict[str, float]:
    return {
        "usd": round(spent.usd, 4),
        "listed_usd": round(spent.usd - spent.estimated_usd, 4),
        "estimated_usd": round(spent.estimated_usd, 4),
        "unknown_hours": round(spent.unknown_seconds / SECONDS_PER_HOUR, 4),
        **{name: round(getattr(split, name), 4) for name in ACTIVITY_COLUMNS},
    }


def _action_json(line: ActionLine) -> dict[str, Any]:
    action = line.action
    return {
        "at": json_time(action.created_at),
        "provider": line.provider,
        "account": action.account,
        "instance_id": action.instance_id,
        "rule": action.rule,
        "kind": action.kind.value,
        "status": action.status.value,
        "dry_run": action.dry_run,
        "usd_per_hour_at_call": line.usd_per_hour_at_call,
        "stopped_usd_per_hour": line.stopped_usd_per_hour,
        "estimated_saving_usd": (
            None if line.estimated_saving_usd is None else round(line.estimated_saving_usd, 4)
        ),
    }


def report_json(report: Report) -> dict[str, Any]:
    """The ``--json`` object."""
    return {
        "start": json_time(report.start),
        "end": json_time(report.end),
        "by": report.by,
        "total": _figures(report.total, report.activity),
        "rows": [{**row.key, **_figures(row.spend, row.activity)} for row in report.rows],
        "actions": [_action_json(line) for line in report.actions],
        "estimated_saving_usd": round(report.estimated_saving_usd, 4),
    }


def csv_rows(report: Report) -> list[list[str]]:
    """The header row and the data rows of ``--csv``."""
    if report.by == "rule":
        keys = list(_action_json(report.actions[0]) if report.actions else _ACTION_KEYS)
        return [
            keys,
            *([_cell(value) for value in _action_json(a).values()] for a in report.actions),
        ]
    key_names = _key_names(report.by)
    header = ["start", "end", *key_names, *FIGURE_COLUMNS]
    return [header, *(_csv_row(report, row, key_names) for row in report.rows)]


def _key_names(by: str) -> list[str]:
    """The key columns of a row of ``--by by`` in the CSV."""
    if by == "day":
        return ["day"]
    if by == "instance":
        return ["provider", "account", "kind", "id"]
    return ["provider", "account"]


def _csv_row(report: Report, row: SpendRow, key_names: list[str]) -> list[str]:
    day = row.key.get("day")
    low, high = (day, day) if day else (json_time(report.start), json_time(report.end))
    figures = _figures(row.spend, row.activity)
    return [
        low or "",
        high or "",
        *(row.key[k] for k in key_names),
        *(_cell(figures[c]) for c in FIGURE_COLUMNS),
    ]


_ACTION_KEYS = (
    "at",
    "provider",
    "account",
    "instance_id",
    "rule",
    "kind",
    "status",
    "dry_run",
    "usd_per_hour_at_call",
    "stopped_usd_per_hour",
    "estimated_saving_usd",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_csv(report: Report, out: Any) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(csv_rows(report))


def report_lines(report: Report) -> list[str]:
    """The text: the window and totals, the spend and activity tables (unless ``--by rule``),
    the actions."""
    lines = _total_lines(report)
    if report.by != "rule":
        lines += ["", *_spend_table(report)]
        if report.rows:
            lines += ["", *_activity_table(report)]
    return [*lines, "", *_action_lines(report)]


def _total_lines(report: Report) -> list[str]:
    total, split = report.total, report.activity
    unknown = total.unknown_seconds / SECONDS_PER_HOUR
    return [
        f"window {json_time(report.start)} .. {json_time(report.end)}",
        f"spent {format_usd(total.usd)} (estimated {format_usd(total.estimated_usd)})"
        + (f", {unknown:.1f} h at unknown cost" if unknown else ""),
        "GPU-hours "
        + ", ".join(
            f"{activity.value} {split.gpu_hours(activity):.1f} ({format_usd(split.usd(activity))})"
            for activity in ACTIVITIES
        ),
        f"billed without a GPU (stopped disks, volumes): {format_usd(split.no_gpu_usd)}",
    ]


# The order activity columns and totals are shown in.
ACTIVITIES = (Activity.IDLE, Activity.BLIND, Activity.BUSY)


def _key_cells(by: str, key: dict[str, str]) -> list[str]:
    if by == "day":
        return [key["day"]]
    if by == "instance":
        prefix = "" if key["kind"] == "instance" else "volume "
        return [key["provider"], key["account"], _short(prefix + key["id"], 24)]
    return [key["provider"], key["account"]]


def _key_headers(by: str) -> list[str]:
    if by == "day":
        return ["DAY"]
    if by == "instance":
        return ["PROVIDER", "ACCOUNT", "INSTANCE/VOLUME"]
    return ["PROVIDER", "ACCOUNT"]


def _spend_table(report: Report) -> list[str]:
    if not report.rows:
        return ["nothing billed in this window"]
    rows = [[*_key_cells(report.by, row.key), *_money(row.spend)] for row in report.rows]
    headers = (*_key_headers(report.by), "USD", "LISTED", "ESTIMATED", "UNKNOWN H")
    return table(headers, rows, width=TEXT_WIDTH)


def _activity_table(report: Report) -> list[str]:
    """GPU-hours and dollars by activity, one line per row (the key without the provider)."""
    by = report.by
    rows = [
        [*_key_cells(by, row.key)[1 if by != "day" else 0 :], *_activity_cells(row.activity)]
        for row in report.rows
    ]
    headers = [*_key_headers(by)[1 if by != "day" else 0 :]]
    for activity in ACTIVITIES:
        name = activity.value.upper()
        headers += [f"{name} GPU-H", f"{name} $"]
    return table((*headers, "NO GPU $"), rows, width=TEXT_WIDTH)


def _activity_cells(split: ActivityFigure) -> list[str]:
    cells = []
    for activity in ACTIVITIES:
        cells += [f"{split.gpu_hours(activity):.1f}", format_usd(split.usd(activity))]
    return [*cells, format_usd(split.no_gpu_usd)]


def _action_lines(report: Report) -> list[str]:
    if not report.actions:
        return ["no stops or destroys in this window"]
    rows = [_action_cells(line) for line in report.actions]
    headers = ("UTC", "INSTANCE", "ACTION", "RULE", "$/H STOP", "EST. SAVING")
    return [
        *table(headers, rows),
        f"estimated saving to the window's end: {format_usd(report.estimated_saving_usd)} "
        "(what the stopped rates would have billed)",
    ]


def _action_cells(line: ActionLine) -> list[str]:
    action = line.action
    saving = line.estimated_saving_usd
    return [
        f"{action.created_at:%m-%d %H:%M}",
        _short(ref(action.account, action.instance_id), 24),
        f"{action.kind.value} {'dry-run' if action.dry_run else action.status.value}",
        action.rule,
        _rate(line.stopped_usd_per_hour),
        "" if saving is None else format_usd(saving),
    ]


def _short(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis (the JSON and CSV keep it whole)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _money(spent: SpendFigure) -> list[str]:
    return [
        format_usd(spent.usd),
        format_usd(spent.usd - spent.estimated_usd),
        format_usd(spent.estimated_usd),
        f"{spent.unknown_seconds / SECONDS_PER_HOUR:.1f}" if spent.unknown_seconds else "",
    ]


def _rate(value: float | None) -> str:
    return "" if value is None else format_rate(value).removesuffix("/h")
