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
the time from the action to the end of the window, for actions verified done — an estimate, not
a bill. GPU-hours idle / blind / busy are not in this report yet.

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
from watchdog_gpu.notify.render import format_rate, format_usd
from watchdog_gpu.spend import SECONDS_PER_HOUR, SpendFigure
from watchdog_gpu.spend_report import GROUPINGS, ActionLine, Report, build_report

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
        report = collect(source, start, end, args.by)
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


def collect(source: ReadSource, start: datetime, end: datetime, by: str) -> Report:
    """The report of ``[start, end]`` from the recorded ledger and actions."""
    view = source.store.load_fleet_view(end, timedelta(0), start)
    actions = [row.to_record() for row in source.store.list_actions(since=start)]
    return build_report(view, actions, start, end, by)


# -- output -----------------------------------------------------------------------------------

SPEND_COLUMNS = ("usd", "listed_usd", "estimated_usd", "unknown_hours")


def _figures(spent: SpendFigure) -> dict[str, float]:
    return {
        "usd": round(spent.usd, 4),
        "listed_usd": round(spent.usd - spent.estimated_usd, 4),
        "estimated_usd": round(spent.estimated_usd, 4),
        "unknown_hours": round(spent.unknown_seconds / SECONDS_PER_HOUR, 4),
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
        "total": _figures(report.total),
        "rows": [{**row.key, **_figures(row.spend)} for row in report.rows],
        "actions": [_action_json(line) for line in report.actions],
        "estimated_saving_usd": round(report.estimated_saving_usd, 4),
    }


def csv_rows(report: Report) -> list[list[str]]:
    """The header row and the data rows of ``--csv``."""
    start, end = json_time(report.start) or "", json_time(report.end) or ""
    if report.by == "rule":
        keys = list(_action_json(report.actions[0]) if report.actions else _ACTION_KEYS)
        return [
            keys,
            *([_cell(value) for value in _action_json(a).values()] for a in report.actions),
        ]
    key_names = ["day"] if report.by == "day" else ["provider", "account"]
    if report.by == "instance":
        key_names += ["kind", "id"]
    header = ["start", "end", *key_names, *SPEND_COLUMNS]
    body = []
    for row in report.rows:
        day = row.key.get("day")
        low, high = (day, day) if day else (start, end)
        figures = _figures(row.spend)
        body.append(
            [
                low,
                high,
                *(row.key[k] for k in key_names),
                *(_cell(figures[c]) for c in SPEND_COLUMNS),
            ]
        )
    return [header, *body]


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
    """The text: the window, the spend table (unless ``--by rule``), the actions."""
    total = report.total
    unknown = total.unknown_seconds / SECONDS_PER_HOUR
    lines = [
        f"window {json_time(report.start)} .. {json_time(report.end)}",
        f"spent {format_usd(total.usd)} (estimated {format_usd(total.estimated_usd)})"
        + (f", {unknown:.1f} h at unknown cost" if unknown else ""),
    ]
    if report.by != "rule":
        if report.by == "day":
            names = ["DAY"]
        elif report.by == "instance":
            names = ["PROVIDER", "ACCOUNT", "INSTANCE/VOLUME"]
        else:
            names = ["PROVIDER", "ACCOUNT"]
        rows = []
        for row in report.rows:
            key = row.key
            if report.by == "day":
                cells = [key["day"]]
            elif report.by == "instance":
                prefix = "" if key["kind"] == "instance" else "volume "
                cells = [key["provider"], key["account"], _short(prefix + key["id"], 24)]
            else:
                cells = [key["provider"], key["account"]]
            rows.append([*cells, *_money(row.spend)])
        lines += [""]
        if rows:
            lines += table((*names, "USD", "LISTED", "ESTIMATED", "UNKNOWN H"), rows)
        else:
            lines.append("nothing billed in this window")
    lines.append("")
    if not report.actions:
        lines.append("no stops or destroys in this window")
        return lines
    action_rows = []
    for line in report.actions:
        action = line.action
        saving = line.estimated_saving_usd
        action_rows.append(
            [
                f"{action.created_at:%m-%d %H:%M}",
                _short(ref(action.account, action.instance_id), 24),
                f"{action.kind.value} {'dry-run' if action.dry_run else action.status.value}",
                action.rule,
                _rate(line.stopped_usd_per_hour),
                "" if saving is None else format_usd(saving),
            ]
        )
    headers = ("UTC", "INSTANCE", "ACTION", "RULE", "$/H STOP", "EST. SAVING")
    lines += table(headers, action_rows)
    lines.append(
        f"estimated saving to the window's end: {format_usd(report.estimated_saving_usd)} "
        "(what the stopped rates would have billed)"
    )
    return lines


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
