"""``watchdog-gpu config check [--config PATH]``: validate the configuration and summarise it.

On success it prints which file was used, the mode, each account with its provider and where its
API key comes from (only ever "set" or "missing", never the value) and what its GPU evidence can
prove (``watchdog_gpu/evidence.py``: the rules judge by the same), each enabled rule with its
action and effective mode, the notification routes, and which values came from the environment
(``WATCHDOG_GPU_*`` variables win over the file; ``$STATE_DIRECTORY``, a configuration in
``/etc/watchdog-gpu`` (→ ``/var/lib/watchdog-gpu``) or ``$XDG_STATE_HOME`` place the default
database); exit 0. Missing secrets and a configuration without accounts are reported but do not
fail the check (``run`` refuses to start without them). Warnings go to stderr, deprecated keys
among them. An invalid configuration prints every problem with its dotted path to stderr and
exits 2; so does an SSH private key that is available but that ``run`` could not use (not a
private key, a wrong passphrase), named by its account (``accounts[1].ssh.private_key``).
``--json`` prints one JSON object instead (``valid``, ``problems``,
``warnings``, ``ready_to_run``, the summary), with the same exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.commands.common import print_json
from watchdog_gpu.commands.database_check import DatabaseCheck, check_database
from watchdog_gpu.config import (
    NO_ACCOUNTS,
    ConfigError,
    ConfigProblem,
    Settings,
    config_warnings,
    environment_overrides,
    find_config_file,
    iter_secret_references,
    load_settings,
    resolve_secrets,
)
from watchdog_gpu.rules.base import RuleConfig


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``config check`` to the command line."""
    config = subparsers.add_parser(
        "config",
        help=summary("config"),
        description="Inspect the configuration: `config check` validates it, lists every "
        "problem by its dotted path and summarises what it configures; `config example` prints "
        "a commented file with every option and its default.",
    )
    actions = config.add_subparsers(dest="config_action", metavar="{check,example}", required=True)
    check = actions.add_parser(
        "check",
        help="validate the configuration and summarise it",
        description=doc_paragraph(__doc__),
    )
    check.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="config file (default: $WATCHDOG_GPU_CONFIG, ./watchdog-gpu.toml, "
        "~/.config/watchdog-gpu/config.toml, /etc/watchdog-gpu/config.toml)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument(
        "--connect",
        action="store_true",
        help="also open the database read-only: reachable, its schema revision, who leads "
        "(exit 1 when the daemon could not use it)",
    )
    check.set_defaults(handler=run_check)
    example = actions.add_parser(
        "example",
        help="print a commented configuration file with every option and its default",
        description="Print config.example.toml: every option of the configuration with its "
        "default and what it does, generated from the configuration's models (docs/"
        "configuration.md is the same as a reference). Redirect it to a file, edit the "
        "[[accounts]] tables, then run `config check`.",
    )
    example.set_defaults(handler=run_example)


def run_example(args: argparse.Namespace) -> int:
    """Print the generated example configuration."""
    from watchdog_gpu.config.generate import example

    sys.stdout.write(example())
    return EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    """Load, validate and summarise; 0 if valid, 2 with every problem on stderr if not."""
    environ = os.environ
    try:
        origin = find_config_file(args.config, environ).origin
        settings = load_settings(args.config, environ)
        _check_ssh_keys(settings, environ)
    except ConfigError as error:
        if args.json:
            print_json({"valid": False, "problems": _problems(error.problems)})
        else:
            print_problems(error, sys.stderr)
        return EXIT_USAGE
    warnings = config_warnings(settings)
    database = _connect(settings, environ) if args.connect else None
    _print_report(settings, origin, environ, warnings, database, as_json=args.json)
    return EXIT_OK if database is None or database.ok else EXIT_FAILURE


def _print_report(
    settings: Settings,
    origin: str,
    environ: Mapping[str, str],
    warnings: list[ConfigProblem],
    database: DatabaseCheck | None,
    *,
    as_json: bool,
) -> None:
    """The check of a valid configuration: one JSON object, or the warnings on stderr and the
    summary; then what the database check found."""
    if as_json:
        report = check_report(settings, origin, environ, warnings)
        if database is not None:
            report["database_check"] = {"ok": database.ok, "lines": list(database.lines)}
        print_json(report)
        return
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print_summary(settings, origin, environ, sys.stdout)
    if database is not None:
        for line in database.lines:
            print(line)


def _connect(settings: Settings, environ: Mapping[str, str]) -> DatabaseCheck:
    try:
        url = settings.watchdog.effective_database_url(environ)
    except ConfigError as error:
        return DatabaseCheck(False, tuple(f"database: {problem}" for problem in error.problems))
    return check_database(url)


def print_problems(error: ConfigError, out: TextIO) -> None:
    """Every problem of ``error`` on its own line, with its dotted path."""
    count = len(error.problems)
    print(f"invalid configuration ({count} problem{'s' if count != 1 else ''}):", file=out)
    for problem in error.problems:
        print(f"  {problem}", file=out)


def _problems(problems: Iterable[ConfigProblem]) -> list[dict[str, str]]:
    return [{"path": problem.path, "message": problem.message} for problem in problems]


def _check_ssh_keys(settings: Settings, environ: Mapping[str, str]) -> None:
    """Load every available SSH private key as ``run`` does; raises ConfigError for those it
    would refuse (not a key, wrong passphrase ...). A key whose secret is missing here is
    reported among the missing secrets instead."""
    from watchdog_gpu.wiring import load_ssh_keys

    missing = {problem.path.split(".ssh.")[0] for problem in resolve_secrets(settings, environ)}
    try:
        load_ssh_keys(settings, environ)
    except ConfigError as error:
        problems = [p for p in error.problems if p.path.split(".ssh")[0] not in missing]
        if problems:
            raise ConfigError(problems) from None


def _refusals(settings: Settings, environ: Mapping[str, str]) -> list[ConfigProblem]:
    """Why ``watchdog-gpu run`` would refuse to start with these valid settings."""
    refusals = [] if settings.accounts else [NO_ACCOUNTS]
    return refusals + resolve_secrets(settings, environ)


def _rules(settings: Settings) -> list[tuple[str, str, str, str]]:
    """(name, action, effective mode, note) of every enabled rule."""
    return [
        (name, getattr(rule, "action", "notify"), settings.effective_mode(name), _note(name, rule))
        for name, rule in settings.rules.by_name().items()
        if rule.enabled
    ]


def check_report(
    settings: Settings,
    origin: str,
    environ: Mapping[str, str],
    warnings: Iterable[ConfigProblem],
) -> dict[str, Any]:
    """The ``--json`` form of a valid configuration's check (secrets only as their source)."""
    refusals = _refusals(settings, environ)
    evidence = settings.evidence()
    return {
        "valid": True,
        "ready_to_run": not refusals,
        "config_file": str(settings.config_file),
        "origin": origin,
        "mode": settings.watchdog.mode,
        "database": _database(settings, environ),
        "metrics": _metrics(settings),
        "probe": settings.probe.enabled,
        "accounts": [
            {
                "name": account.name,
                "provider": account.provider,
                "api_key": account.api_key.describe(environ),
                "protected": account.protect,
                "gpu_evidence": evidence[account.name].summary,
            }
            for account in settings.accounts
        ],
        "rules": [
            {"name": name, "action": action, "mode": mode, "note": note.strip() or None}
            for name, action, mode, note in _rules(settings)
        ],
        "notify_routes": len(settings.notify.routes),
        "notify_config": None
        if settings.notify.config is None
        else settings.notify.config.describe(environ),
        "notify_digest": settings.notify.digest.describe(),
        "from_environment": [
            {"path": path, "variable": variable}
            for path, variable in _environment_sources(settings, environ)
        ],
        "problems": [],
        "refusals": _problems(refusals),
        "warnings": _problems(warnings),
    }


def print_summary(settings: Settings, origin: str, environ: Mapping[str, str], out: TextIO) -> None:
    """The human summary of valid settings; secrets shown only as set/missing and their source."""
    unavailable = resolve_secrets(settings, environ)
    lines = [
        *_daemon_lines(settings, origin, environ),
        *_account_lines(settings, environ),
        *_rule_lines(settings),
        *_notify_lines(settings),
        *_secret_lines(settings, environ),
        *(f"{problem}" for problem in unavailable if problem.path.endswith(".key_file")),
        _verdict(settings, environ, unavailable),
    ]
    print("\n".join(lines), file=out)


def _daemon_lines(settings: Settings, origin: str, environ: Mapping[str, str]) -> list[str]:
    watchdog = settings.watchdog
    dry_run = " (dry run: nothing is stopped or destroyed)" if watchdog.mode == "monitor" else ""
    return [
        f"config file: {settings.config_file} ({origin})",
        f"mode: {watchdog.mode}{dry_run}",
        f"database: {_database(settings, environ)}",
        f"metrics: {_metrics(settings)}",
        f"probe: {'enabled' if settings.probe.enabled else 'disabled'}",
    ]


def _account_lines(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    lines = [f"accounts ({len(settings.accounts)}):"]
    lines += _table(
        [
            account.name,
            account.provider,
            f"api_key: {account.api_key.describe(environ)}"
            + ("  (protected)" if account.protect else ""),
        ]
        for account in settings.accounts
    )
    evidence = settings.evidence()
    lines += [f"  {name} GPU evidence: {item.summary}" for name, item in evidence.items()]
    return lines


def _rule_lines(settings: Settings) -> list[str]:
    lines = ["rules (action, effective mode):"]
    lines += _table([name, action, mode + note] for name, action, mode, note in _rules(settings))
    disabled = [name for name, rule in settings.rules.by_name().items() if not rule.enabled]
    if disabled:
        lines.append(f"  disabled: {', '.join(disabled)}")
    return lines


def _notify_lines(settings: Settings) -> list[str]:
    routes = len(settings.notify.routes)
    notify = f"notify: {routes} route{'s' if routes != 1 else ''}"
    if settings.notify.config is not None:
        notify += " and an Apprise config file (notify.config)"
    return [notify, f"spend digest: {settings.notify.digest.describe()}"]


def _secret_lines(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The secrets other than the API keys, then the values the environment decided."""
    lines: list[str] = []
    other = [
        [f"{path}:", reference.describe(environ)]
        for path, reference in iter_secret_references(settings)
        if not path.endswith(".api_key")
    ]
    if other:
        lines.append("other secrets:")
        lines += _table(other)
    sources = _environment_sources(settings, environ)
    if sources:
        lines.append("from the environment (these win over the file):")
        lines += _table([f"{path}:", f"${variable}"] for path, variable in sources)
    return lines


def _verdict(
    settings: Settings, environ: Mapping[str, str], unavailable: Sequence[ConfigProblem]
) -> str:
    if not _refusals(settings, environ):
        return "configuration is valid"
    if not settings.accounts:
        return (
            "configuration is valid, but `watchdog-gpu run` refuses to start: "
            "no [[accounts]] configured (it would watch nothing)"
        )
    return (
        f"configuration is valid; {len(unavailable)} secret(s) not available: "
        "`watchdog-gpu run` refuses to start until they are"
    )


def _environment_sources(settings: Settings, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(dotted path, variable) of each effective value the environment decided."""
    sources = environment_overrides(environ)
    origin = settings.watchdog.database_origin(environ)
    if origin.startswith("$"):
        sources.append(("watchdog.database_url (default location)", origin[1:]))
    return sources


def _table(rows: Iterable[list[str]]) -> list[str]:
    """Rows as indented lines with aligned columns."""
    materialised = list(rows)
    if not materialised:
        return []
    widths = [
        max(len(row[column]) for row in materialised) for column in range(len(materialised[0]))
    ]
    return [
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in materialised
    ]


def _database(settings: Settings, environ: Mapping[str, str]) -> str:
    url = settings.watchdog.database_url
    if url is None:
        where = settings.watchdog.database_origin(environ)
        return f"{settings.watchdog.effective_database_url(environ)} (default: {where})"
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _metrics(settings: Settings) -> str:
    metrics = settings.metrics
    if not metrics.enabled:
        return "disabled"
    host = (
        f"[{metrics.listen_address}]" if ":" in metrics.listen_address else metrics.listen_address
    )
    return f"http://{host}:{metrics.port}/metrics"


def _note(name: str, config: RuleConfig) -> str:
    """Why an enabled rule will not fire as configured (it has no limit to enforce)."""
    if name == "max_runtime" and getattr(config, "limit", None) is None:
        return "  (no limit set: inactive)"
    if name == "budget":
        ceilings = ("daily_usd", "monthly_usd", "max_usd_per_hour", "min_balance_usd")
        scopes = [config, *getattr(config, "accounts", {}).values()]
        if all(getattr(scope, ceiling) is None for scope in scopes for ceiling in ceilings):
            return "  (no ceiling set: inactive)"
    return ""
