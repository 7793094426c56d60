"""``watchdog-gpu notify test [--config PATH | --url URL ...]``: send a test message to every route.

Each route gets the test message on its own, whatever severities it takes, and one line reports
it: ``ok`` or ``FAIL``, the route, its URL in Apprise's privacy-masked form and, on failure,
Apprise's reason. Exit 0 when every route worked, 1 when one failed, 2 for an invalid
configuration, a missing URL secret or no route at all. ``--url`` (repeatable) tests URLs
without a configuration file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import ConfigError, load_settings
from watchdog_gpu.model import Severity
from watchdog_gpu.notify.delivery import AppriseDelivery, Route, notify_test, routes_from_config


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``notify test`` to the command line."""
    notify = subparsers.add_parser("notify", help=summary("notify"))
    actions = notify.add_subparsers(dest="notify_action", metavar="{test}", required=True)
    test = actions.add_parser(
        "test",
        help="send a test message to every route",
        description=doc_paragraph(__doc__),
    )
    source = test.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, metavar="PATH", help="config file")
    source.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="an Apprise URL to test instead of the configured routes (repeatable)",
    )
    test.set_defaults(handler=run_test)


def run_test(args: argparse.Namespace) -> int:
    """Send the test message; print one line per route; 0 if all worked."""
    try:
        routes, timeout_seconds = _routes(args)
        if not routes:
            print("no notification routes configured ([[notify.routes]])", file=sys.stderr)
            return EXIT_USAGE
        delivery = AppriseDelivery(routes, timeout_seconds=timeout_seconds)
    except ConfigError as error:
        print("invalid notification routes:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    results = notify_test(delivery, SystemClock().now())
    for result in results:
        severities = ", ".join(s.value for s in Severity if s in result.severities)
        line = f"{'ok  ' if result.ok else 'FAIL'}  {result.label}  {result.url}  ({severities})"
        print(line if result.ok else f"{line}: {result.detail}")
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILURE


def _routes(args: argparse.Namespace) -> tuple[list[Route], float]:
    if args.url:
        everything = frozenset(Severity)
        routes = [Route(url, everything, label=f"--url[{i}]") for i, url in enumerate(args.url)]
        return routes, 15.0
    settings = load_settings(args.config, os.environ)
    section = settings.notify
    return routes_from_config(section, os.environ), section.timeout.total_seconds()
