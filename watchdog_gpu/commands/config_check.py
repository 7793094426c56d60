"""``watchdog-gpu config check [--config PATH]``: validate the configuration and summarise it.

On success it prints which file was used, the mode, each account with its provider and where its
API key comes from (only ever "set" or "missing", never the value), each enabled rule with its
action and effective mode, and the notification routes; exit 0. Missing secrets are reported but
do not fail the check (``run`` refuses to start without them). Warnings go to stderr. An invalid
configuration prints every problem with its dotted path to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from watchdog_gpu.cli import EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.config import (
    ConfigError,
    Settings,
    config_warnings,
    find_config_file,
    iter_secret_references,
    load_settings,
    resolve_secrets,
)
from watchdog_gpu.rules.base import RuleConfig


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``config check`` to the command line."""
    config = subparsers.add_parser("config", help=summary("config"))
    actions = config.add_subparsers(dest="config_action", metavar="{check}", required=True)
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
    check.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Load, validate and summarise; 0 if valid, 2 with every problem on stderr if not."""
    environ = os.environ
    try:
        origin = find_config_file(args.config, environ).origin
        settings = load_settings(args.config, environ)
    except ConfigError as error:
        print_problems(error, sys.stderr)
        return EXIT_USAGE
    for warning in config_warnings(settings):
        print(f"warning: {warning}", file=sys.stderr)
    print_summary(settings, origin, environ, sys.stdout)
    return EXIT_OK


def print_problems(error: ConfigError, out: TextIO) -> None:
    """Every problem of ``error`` on its own line, with its dotted path."""
    count = len(error.problems)
    print(f"invalid configuration ({count} problem{'s' if count != 1 else ''}):", file=out)
    for problem in error.problems:
        print(f"  {problem}", file=out)


def print_summary(settings: Settings, origin: str, environ: Mapping[str, str], out: TextIO) -> None:
    """The human summary of valid settings; secrets shown only as set/missing and their source."""
    watchdog = settings.watchdog
    lines = [
        f"config file: {settings.config_file} ({origin})",
        f"mode: {watchdog.mode}"
        + (" (dry run: nothing is stopped or destroyed)" if watchdog.mode == "monitor" else ""),
        f"database: {_database(settings, environ)}",
        f"metrics: {_metrics(settings)}",
        f"probe: {'enabled' if settings.probe.enabled else 'disabled'}",
        f"accounts ({len(settings.accounts)}):",
    ]
    lines += _table(
        [
            account.name,
            account.provider,
            f"api_key: {account.api_key.describe(environ)}"
            + ("  (protected)" if account.protect else ""),
        ]
        for account in settings.accounts
    )
    lines.append("rules (action, effective mode):")
    enabled = {name: rule for name, rule in settings.rules.by_name().items() if rule.enabled}
    lines += _table(
        [name, getattr(rule, "action", "notify"), settings.effective_mode(name) + _note(name, rule)]
        for name, rule in enabled.items()
    )
    disabled = [name for name in settings.rules.by_name() if name not in enabled]
    if disabled:
        lines.append(f"  disabled: {', '.join(disabled)}")
    routes = len(settings.notify.routes)
    lines.append(f"notify: {routes} route{'s' if routes != 1 else ''}")
    other = [
        [f"{path}:", reference.describe(environ)]
        for path, reference in iter_secret_references(settings)
        if not path.endswith(".api_key")
    ]
    if other:
        lines.append("other secrets:")
        lines += _table(other)
    unavailable = resolve_secrets(settings, environ)
    lines += [f"{problem}" for problem in unavailable if problem.path.endswith(".key_file")]
    if unavailable:
        lines.append(
            f"configuration is valid; {len(unavailable)} secret(s) not available: "
            "`watchdog-gpu run` refuses to start until they are"
        )
    else:
        lines.append("configuration is valid")
    print("\n".join(lines), file=out)


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
        return f"{settings.watchdog.effective_database_url(environ)} (default)"
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
