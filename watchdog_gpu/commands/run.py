"""``watchdog-gpu run [--config PATH]``: the daemon.

Loads and validates the configuration and checks that it names at least one account and that
every secret is available (otherwise it lists every problem on stderr and exits 2), configures
logging, migrates the database, starts the jobs (polls, GPU probes, evaluation, actions,
notifications, retention) and the metrics endpoint, tells systemd it is ready, and runs until
SIGTERM or SIGINT; then it lets the action in flight finish and exits 0. Exit 2 too when the
metrics port is taken; exit 1 when the database cannot be opened or migrated.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from watchdog_gpu.cli import EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.config import NO_ACCOUNTS, ConfigError, load_settings, resolve_secrets


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` to the command line."""
    run = subparsers.add_parser(
        "run",
        help=summary("run"),
        description=doc_paragraph(__doc__),
    )
    run.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="config file (default: $WATCHDOG_GPU_CONFIG, ./watchdog-gpu.toml, "
        "~/.config/watchdog-gpu/config.toml, /etc/watchdog-gpu/config.toml)",
    )
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Validate, then run the daemon; the exit code of :func:`watchdog_gpu.daemon.run_daemon`,
    or 2 for an invalid configuration or missing secrets."""
    from watchdog_gpu.clock import SystemClock
    from watchdog_gpu.daemon import print_config_problems, run_daemon
    from watchdog_gpu.log import configure_logging

    environ = os.environ
    try:
        settings = load_settings(args.config, environ)
    except ConfigError as error:
        print_config_problems(error)
        return EXIT_USAGE
    if not settings.accounts:
        # A daemon without accounts polls nothing and protects nothing while looking healthy.
        print(f"cannot start: {NO_ACCOUNTS}", file=sys.stderr)
        return EXIT_USAGE
    missing = resolve_secrets(settings, environ)
    if missing:
        count = len(missing)
        print(
            f"cannot start: {count} secret{'s' if count != 1 else ''} not available:",
            file=sys.stderr,
        )
        for problem in missing:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.watchdog.log_level, settings.watchdog.log_format, environ=environ)
    return run_daemon(settings, SystemClock(), environ)
