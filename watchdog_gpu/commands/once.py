"""``watchdog-gpu once [--dry-run] [--config PATH]``: one full tick, then exit.

Poll every configured account, probe the running GPUs, evaluate the rules, plan, carry out due
actions and deliver notifications — the daemon's tick, once, with the configured mode — and
print a summary: accounts polled ok/failed, probes by outcome, findings, decisions, executed
actions and notifications. With ``--dry-run`` it has no side effects: monitor mode on a
throw-away copy of the database, no notification sent, no lock taken (it runs beside the daemon).

Lock, result line, ``--json`` and exit codes: ``docs/commands.md``, "once".
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands import common
from watchdog_gpu.commands.colour import colour_enabled, paint
from watchdog_gpu.commands.common import (
    CommandError,
    json_time,
    print_json,
    print_lines,
    reports_errors,
    timestamp,
)
from watchdog_gpu.config import ConfigError, Settings
from watchdog_gpu.errors import DatabaseInUseError, SchemaTooNewError, WatchdogError
from watchdog_gpu.log import install_redaction
from watchdog_gpu.model import (
    IN_FLIGHT_ACTION_STATUSES,
    Finding,
    PlanStatus,
    ProbeOutcome,
    ProbeStatus,
)
from watchdog_gpu.notify.render import format_clock
from watchdog_gpu.plan import Decision
from watchdog_gpu.reports import TickReport
from watchdog_gpu.store.lock import NoLock, database_lock
from watchdog_gpu.tick import Watchdog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``once`` to the command line."""
    parser = subparsers.add_parser(
        "once",
        help=summary("once"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no side effects: monitor mode on a copy of the database, no lock, nothing sent",
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help="configuration file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run_once)


@reports_errors
def run_once(args: argparse.Namespace) -> int:
    """Run the tick and print its summary; 0 when healthy."""
    environ = os.environ
    install_redaction()
    settings = common.settings_to_act(args.config, environ, "nothing to poll")
    # A dry run always works on a copy: even a monitoring tick records findings, queues and
    # sends messages and takes the lock a running daemon holds.
    dry_run = bool(args.dry_run)
    if dry_run:
        settings = monitor_only(settings)
    # On a copy nothing is written to the real database: no lock needed, a daemon may run.
    lock = NoLock() if dry_run else database_lock(_url(settings, environ), role="once")
    lock.acquire()  # DatabaseInUseError: exit 2 while a daemon runs (reports_errors)
    try:
        with _database_for_run(settings, environ, copy=dry_run) as run_settings:
            report, notes = _tick(run_settings, environ, dry_run=dry_run)
    finally:
        lock.release()
    if args.json:
        print_json(summary_json(report, notes, sent=not dry_run))
    else:
        colour = colour_enabled(sys.stdout)
        print_lines(summary_lines(report, notes, sent=not dry_run, colour=colour))
    return EXIT_OK if result_of(report) == "healthy" else EXIT_FAILURE


def result_of(report: TickReport) -> str:
    """``healthy``, ``degraded`` (a probe failed: some GPUs are unknown) or ``unhealthy``."""
    if not report.healthy:
        return "unhealthy"
    if _failed_probes(report):
        return "degraded"
    return "healthy"


def _failed_probes(report: TickReport) -> list[ProbeOutcome]:
    return [probe for probe in report.probes if probe.status is not ProbeStatus.OK]


def _url(settings: Settings, environ: Mapping[str, str]) -> str:
    return settings.watchdog.effective_database_url(environ)


def monitor_only(settings: Settings) -> Settings:
    """``settings`` with the global mode and every rule's own mode set to monitor (a rule with
    ``mode = "enforce"`` would otherwise act despite a global monitor)."""
    rules = type(settings.rules)(
        **{
            name: rule.model_copy(update={"mode": "monitor"})
            for name, rule in settings.rules.by_name().items()
        }
    )
    watchdog = settings.watchdog.model_copy(update={"mode": "monitor"})
    return settings.model_copy(update={"watchdog": watchdog, "rules": rules})


@contextmanager
def _database_for_run(
    settings: Settings, environ: Mapping[str, str], *, copy: bool
) -> Iterator[Settings]:
    """``settings`` as they are, or pointing at a temporary copy of the SQLite database."""
    if not copy:
        yield settings
        return
    from sqlalchemy.engine import make_url

    url = make_url(settings.watchdog.effective_database_url(environ))
    server = url.get_backend_name() != "sqlite"
    if not server and url.database in (None, "", ":memory:"):
        raise CommandError(
            "--dry-run runs on a copy of the database, which needs a database file or "
            "server, not an in-memory one"
        )
    with tempfile.TemporaryDirectory(prefix="watchdog-gpu-dry-run-") as directory:
        target = Path(directory) / "dry-run.db"
        if server:  # PostgreSQL: the team's history copied into a throw-away SQLite file
            _copy_server_database(url.render_as_string(hide_password=False), target)
        else:
            source = Path(url.database or "").expanduser()
            if source.is_file():
                _copy_sqlite(source, target)
        watchdog = settings.watchdog.model_copy(
            update={"database_url": f"sqlite:///{target}", "database_password": None}
        )
        yield settings.model_copy(update={"watchdog": watchdog})


def _copy_server_database(url: str, target: Path) -> None:
    """A copy of a server database (PostgreSQL) into the SQLite file ``target`` (``db copy``)."""
    from watchdog_gpu.errors import StoreError
    from watchdog_gpu.store import create_engine_for, sqlite_url
    from watchdog_gpu.store.copy import copy_database

    source, copy = create_engine_for(url), create_engine_for(sqlite_url(target))
    try:
        copy_database(source, copy)
    except StoreError as error:
        raise CommandError(
            f"cannot copy the database for the dry run: {error}", code=EXIT_FAILURE
        ) from None
    finally:
        source.dispose()
        copy.dispose()


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy through SQLite's backup API (safe while the daemon writes)."""
    original = duplicate = None
    try:
        original = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        duplicate = sqlite3.connect(target)
        original.backup(duplicate)
    except sqlite3.Error as error:
        raise CommandError(
            f"cannot copy the database {source} for the dry run: {error}", code=EXIT_FAILURE
        ) from None
    finally:
        for connection in (original, duplicate):
            if connection is not None:
                connection.close()


def _tick(
    settings: Settings, environ: Mapping[str, str], *, dry_run: bool
) -> tuple[TickReport, list[str]]:
    from watchdog_gpu.wiring import assemble

    try:
        assembly = assemble(settings, common.clock, environ, streaming=False, claimer="once")
    except ConfigError as error:
        raise common.config_error(error) from None
    except (SchemaTooNewError, DatabaseInUseError):
        raise  # exit 2 with its own message (reports_errors)
    except WatchdogError as error:
        raise CommandError(f"cannot start: {error}", code=EXIT_FAILURE) from None
    notes: list[str] = []
    try:
        watchdog = assembly.watchdog
        if dry_run:
            watchdog.delivery = None
            notes.append(
                "dry run on a copy of the database: nothing was recorded, stopped, destroyed "
                "or sent"
            )
        now = common.current_time()
        report = _dry_tick(watchdog, now, notes) if dry_run else watchdog.tick(now)
    finally:
        assembly.close()
    return report, notes


def _dry_tick(watchdog: Watchdog, now: datetime, notes: list[str]) -> TickReport:
    """The tick's phases, with the executor only when no real action is open."""
    report = TickReport(now)
    report.polled = watchdog.poll_all(now)
    report.probes = watchdog.probe(now)
    watchdog.evaluate(now, report)
    real = [
        a for a in watchdog.store.list_actions(statuses=IN_FLIGHT_ACTION_STATUSES) if not a.dry_run
    ]
    if real:
        notes.append(
            f"{len(real)} action(s) planned earlier for real are not finished; the dry run "
            "left the executor alone (the daemon or `watchdog-gpu once` carries them out)"
        )
    else:
        report.executed = watchdog.act(now)
    report.delivered = watchdog.deliver(now)
    return report


# -- the summary ------------------------------------------------------------------------------


def summary_lines(
    report: TickReport, notes: list[str], *, sent: bool = True, colour: bool = False
) -> list[str]:
    """The human summary of one tick (``sent``: False when notifications were held back;
    ``colour``: the result coloured, for a terminal)."""
    return [
        f"tick at {timestamp(report.now)}",
        *(f"note: {note}" for note in notes),
        *_poll_lines(report),
        f"probes: {_counts(Counter(p.status.value for p in report.probes)) or 'none'}",
        *_finding_lines(report),
        *_plan_lines(report),
        *_failed_rule_lines(report),
        _actions_line(report),
        _notifications_line(report, sent),
        _result_line(report, colour),
    ]


def _poll_lines(report: TickReport) -> list[str]:
    failed = {account: kind for account, kind in report.polled.items() if kind != "ok"}
    return [
        f"accounts: {len(report.polled) - len(failed)} polled ok, {len(failed)} failed",
        *(f"  {account}: FAILED ({kind})" for account, kind in failed.items()),
    ]


def _finding_lines(report: TickReport) -> list[str]:
    lines = [f"findings: {len(report.findings)}"]
    for finding in report.findings:
        action = finding.action.value
        due = f", due {format_clock(finding.due_at, report.now)}" if action != "notify" else ""
        lines.append(f"  {finding.rule} {finding.subject}: {action}{due} — {finding.summary}")
    return lines


def _failed_rule_lines(report: TickReport) -> list[str]:
    if not report.failed_rules:
        return []
    return [
        f"rules failed: {len(report.failed_rules)}",
        *(f"  {rule}: {error}" for rule, error in report.failed_rules.items()),
    ]


def _actions_line(report: TickReport) -> str:
    if report.executed is None:
        return "actions: executor not run"
    counts = Counter(outcome.status for outcome in report.executed.outcomes)
    return f"actions: {_counts(counts) or 'none'}"


def _notifications_line(report: TickReport, sent: bool) -> str:
    delivered = report.delivered
    if delivered is None:
        why = "no routes configured" if sent else "dry run on a copy"
        return f"notifications: none sent ({why})"
    return (
        f"notifications: {delivered.delivered} delivered, {delivered.failed} failed "
        f"(kept for retry), {delivered.unrouted} without a route"
    )


_RESULT_COLOURS = {"healthy": "green", "degraded": "yellow", "unhealthy": "bold red"}


def _result_line(report: TickReport, colour: bool) -> str:
    result = result_of(report)
    text = result if result == "healthy" else result.upper()
    failed = _failed_probes(report)
    if result == "degraded":
        text += (
            f": {len(failed)} of {len(report.probes)} probe(s) failed, so those instances' GPUs "
            "are unknown (never judged idle, never counted busy)"
        )
    elif failed:
        text += f"; {len(failed)} of {len(report.probes)} probe(s) failed too"
    return f"result: {paint(text, _RESULT_COLOURS[result], colour)}"


def summary_json(report: TickReport, notes: list[str], *, sent: bool = True) -> dict[str, Any]:
    """The ``--json`` form of :func:`summary_lines`."""
    plan = report.plan
    executed = report.executed
    delivered = report.delivered
    return {
        "at": json_time(report.now),
        "result": result_of(report),
        "notes": notes,
        "accounts": dict(report.polled),
        "probes": [
            {
                "instance": f"{probe.account}/{probe.instance_id}",
                "status": probe.status.value,
                "detail": probe.detail or None,
            }
            for probe in report.probes
        ],
        "findings": [_finding_json(finding) for finding in report.findings],
        "decisions": [_decision_json(decision) for decision in plan.decisions]
        if plan is not None
        else [],
        "fuse_tripped": bool(plan is not None and plan.fuse_tripped),
        "rules_failed": dict(report.failed_rules),
        "actions": None
        if executed is None
        else dict(Counter(outcome.status for outcome in executed.outcomes)),
        "notifications": None
        if delivered is None
        else {
            "delivered": delivered.delivered,
            "failed": delivered.failed,
            "unrouted": delivered.unrouted,
        },
        "notifications_sent": sent,
    }


def _finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "subject": finding.subject,
        "action": finding.action.value,
        "due_at": json_time(finding.due_at),
        "summary": finding.summary,
    }


def _decision_json(decision: Decision) -> dict[str, Any]:
    return {
        "status": decision.status.value,
        "action": decision.finding.action.value,
        "subject": decision.finding.subject,
        "rule": decision.finding.rule,
        "dry_run": decision.dry_run,
        "note": decision.note or None,
    }


def _plan_lines(report: TickReport) -> list[str]:
    plan = report.plan
    if plan is None:
        return ["decisions: none"]
    counts = Counter(decision.status.value for decision in plan.decisions)
    lines = [f"decisions: {_counts(counts) or 'none'}"]
    shown = (PlanStatus.EXECUTE, PlanStatus.WARN, PlanStatus.BLOCKED, PlanStatus.PROTECTED)
    for decision in plan.decisions:
        if decision.status not in shown:
            continue
        finding = decision.finding
        what = finding.action.value + (" (dry run)" if decision.dry_run else "")
        note = f" — {decision.note}" if decision.note else ""
        lines.append(f"  {decision.status.value}: {what} {finding.subject} ({finding.rule}){note}")
    if plan.fuse_tripped:
        lines.append(f"  FUSE TRIPPED: {plan.fuse_reason} (`watchdog-gpu fuse reset` to release)")
    return lines


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(counter.items()))
