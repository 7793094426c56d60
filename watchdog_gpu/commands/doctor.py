"""``watchdog-gpu doctor [--config PATH] [--json]``: check the configured accounts, read-only.

For each account: checks the API key (and says what the provider tells about its privileges),
lists instances, volumes and balance, shows how each instance maps (state, $/h split, SSH
endpoint, interruptible), probes each running instance once over SSH, names every field it could
not read, and prints what the rules would do now. It never calls a stop or destroy endpoint,
never writes to the watchdog's database (a throw-away copy of the observation is evaluated; only
the SSH host keys the daemon pinned are read from it) and sends no notification, so it is safe
on real accounts, beside a running daemon, before switching to enforce. See docs/doctor.md.

In stream mode it waits, bounded, for each stream's first outcome, so a failed probe says why.
Read-only guarantees, exit codes and ``--json``: ``docs/doctor.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands import common
from watchdog_gpu.commands.common import (
    json_time,
    print_json,
    print_lines,
    reports_errors,
    table,
    timestamp,
)
from watchdog_gpu.config import ConfigError
from watchdog_gpu.probe.runner import CommandRunner

if TYPE_CHECKING:
    from watchdog_gpu.doctor.report import AccountReport, DoctorReport, InstanceReport, RuleVerdict

# The SSH seam: None runs the configured SSH (paramiko); tests put the simulator's runner here.
ssh_runner: CommandRunner | None = None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor`` to the command line."""
    parser = subparsers.add_parser(
        "doctor",
        help=summary("doctor"),
        description=doc_paragraph(__doc__),
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help="configuration file")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.set_defaults(handler=run_doctor_command)


@reports_errors
def run_doctor_command(args: argparse.Namespace) -> int:
    """Examine every account; print the report; 0 when every account was read."""
    from watchdog_gpu.doctor.check import run_doctor
    from watchdog_gpu.log import install_redaction

    environ = os.environ
    install_redaction()
    settings = common.settings_to_act(args.config, environ, "nothing to check")
    try:
        report = run_doctor(settings, common.clock, environ, runner=ssh_runner)
    except ConfigError as error:
        raise common.config_error(error) from None
    if args.json:
        print_json(report_json(report))
    else:
        print_lines(report_lines(report))
    return EXIT_OK if report.healthy else EXIT_FAILURE


# -- JSON -----------------------------------------------------------------------------------------


def report_json(report: DoctorReport) -> dict[str, Any]:
    """The report as JSON values: dataclasses as objects, times as ISO 8601 UTC."""
    value = _jsonable(dataclasses.asdict(report))
    value["healthy"] = report.healthy
    return dict(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return json_time(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


# -- text -----------------------------------------------------------------------------------------


def report_lines(report: DoctorReport) -> list[str]:
    """The human report: one block per account, then what the rules would do."""
    lines = [f"watchdog-gpu doctor at {timestamp(report.at)} (mode {report.mode})"]
    lines += [f"note: {note}" for note in report.notes]
    for account in report.accounts:
        lines.append("")
        lines += _account_lines(account)
    lines.append("")
    lines.append("what the rules would do now:")
    if not report.verdicts:
        lines.append("  nothing: no rule finds anything to warn about or act on")
    lines += [_verdict_line(verdict, report.at) for verdict in report.verdicts]
    lines += [f"  rule {rule} FAILED: {error}" for rule, error in report.failed_rules.items()]
    lines.append("")
    lines.append(_result_line(report))
    return lines


def _verdict_line(verdict: RuleVerdict, now: datetime) -> str:
    from watchdog_gpu.notify.render import format_clock, format_duration

    due = dry = ""
    if verdict.action != "notify":
        wait = verdict.due_at - now
        when = "now" if wait.total_seconds() <= 0 else f"in {format_duration(wait)}"
        due = f" due {format_clock(verdict.due_at, now)} ({when})"
        dry = " (dry run)" if verdict.dry_run else ""
    note = f" [{verdict.note}]" if verdict.note else ""
    return (
        f"  {verdict.status}: {verdict.action}{dry} {verdict.subject} ({verdict.rule})"
        f"{due} — {verdict.summary}{note}"
    )


def _result_line(report: DoctorReport) -> str:
    if report.healthy:
        return "result: every account was read and every probe read its GPUs"
    if all(account.read for account in report.accounts) and not report.failed_rules:
        # once's word for a tick whose probes failed: the accounts are fine, the GPUs unknown
        return (
            f"result: DEGRADED: {report.failed_probes} probe(s) failed, so those instances' "
            "GPUs are unknown (see PROBE above)"
        )
    return "result: PROBLEMS above"


def _account_lines(account: AccountReport) -> list[str]:
    key = account.key
    lines = [
        f"account {account.name} ({account.provider})",
        f"  key: {key.status} — {key.detail}",
        f"  key privileges: {key.scopes}",
        f"  provider: {'; '.join(account.capabilities)}",
    ]
    if account.gpu_evidence:
        lines.append(f"  GPU evidence: {account.gpu_evidence}")
    if not account.read:
        return lines
    lines.append(
        "  balance "
        + ", ".join(
            (
                _money(account.balance_usd),
                f"spend {_rate(account.spend_usd_per_hour)}",
                f"spend limit {_rate(account.spend_limit_usd_per_hour)}",
                f"auto-pay {_flag(account.autopay_enabled)}",
            )
        )
    )
    lines.append(f"  instances: {len(account.instances)}")
    rows = [_instance_row(instance) for instance in account.instances]
    if rows:
        headers = ("ID", "NAME", "STATE", "PROVIDER", "SPOT", "COMPUTE", "STORAGE", "BILLED")
        lines += table((*headers, "SSH", "PROBE"), rows, indent="    ")
    lines.append(f"  volumes: {len(account.volumes)}")
    volumes = [
        (v.volume_id, v.name, _size(v.size_gb), _rate(v.usd_per_hour), _flag(v.attached))
        for v in account.volumes
    ]
    if volumes:
        lines += table(("ID", "NAME", "SIZE", "$/H", "ATTACHED"), volumes, indent="    ")
    unread = _unread(account)
    lines.append(f"  could not read: {'nothing' if not unread else ''}".rstrip())
    lines += [f"    {line}" for line in unread]
    if account.not_offered:
        lines.append(f"  not offered by the provider's API: {', '.join(account.not_offered)}")
    return lines


def _instance_row(instance: InstanceReport) -> tuple[str, ...]:
    probe = instance.probe
    if probe is None:
        probed = f"- ({instance.not_probed})"
    elif probe.status != "ok":
        probed = probe.reason or probe.status
    else:
        peaks = ", ".join("?" if p is None else f"{p:g}%" for p in probe.peak_util_percent)
        probed = f"ok: {probe.verdict} ({probe.gpus} GPU: {peaks})"
    return (
        instance.instance_id,
        instance.name,
        instance.state,
        instance.raw_state,
        "yes" if instance.interruptible else "no",
        _rate(instance.compute_usd_per_hour),
        _rate(instance.storage_usd_per_hour),
        _rate(instance.billed_usd_per_hour),
        instance.ssh_endpoint or "-",
        probed,
    )


def _unread(account: AccountReport) -> list[str]:
    lines = []
    if account.unknown:
        lines.append(f"account: {', '.join(account.unknown)}")
    lines += [
        f"instance {i.instance_id}: {', '.join(i.unknown)}" for i in account.instances if i.unknown
    ]
    lines += [f"volume {v.volume_id}: {', '.join(v.unknown)}" for v in account.volumes if v.unknown]
    return lines


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _rate(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.3f}/h"


def _size(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g} GB"


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")
