"""``watchdog-gpu notify test [--config PATH | --url URL ...]``: send a test message to every route.

Each route gets the test message on its own, whatever severities it takes, and one line reports
it: ``ok`` or ``FAIL``, the route, its URL in Apprise's privacy-masked form and, on failure,
Apprise's reason. Exit 0 when every route worked, 1 when one failed, 2 for an invalid
configuration, a missing URL secret or no route at all. ``--url`` (repeatable) tests URLs
without a configuration file; ``--json`` prints one JSON object (``ok`` and one entry per route).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.commands.common import config_error, current_time, print_json, reports_errors
from watchdog_gpu.config import ConfigError, Settings, load_settings
from watchdog_gpu.model import Severity
from watchdog_gpu.notify.delivery import (
    AppriseConfigText,
    AppriseDelivery,
    Route,
    RouteTestResult,
    config_from_section,
    notify_test,
    routes_from_config,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``notify test`` to the command line."""
    notify = subparsers.add_parser(
        "notify",
        help=summary("notify"),
        description="Notification routes: `notify test` sends a test message to every "
        "configured route and says which ones work.",
    )
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
    test.add_argument("--json", action="store_true", help="print one JSON object")
    test.set_defaults(handler=run_test)


@reports_errors
def run_test(args: argparse.Namespace) -> int:
    """Send the test message; print one line per route; 0 if all worked."""
    try:
        settings = None if args.url else load_settings(args.config, os.environ)
    except ConfigError as error:
        raise config_error(error) from None
    delivery = _delivery(args, settings)
    if delivery is None:
        return EXIT_USAGE
    results = notify_test(delivery, current_time())
    if args.json:
        print_json({"ok": all(r.ok for r in results), "routes": [_as_json(r) for r in results]})
    else:
        _print_results(results)
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILURE


def _delivery(args: argparse.Namespace, settings: Settings | None) -> AppriseDelivery | None:
    """The delivery to the routes to test; None, with why on stderr, when there is none."""
    try:
        routes, config, timeout_seconds = _routes(args, settings)
        if not routes and config is None:
            print(
                "no notification routes configured ([[notify.routes]] or [notify] config)",
                file=sys.stderr,
            )
            return None
        node_name = settings.watchdog.node_name if settings is not None else None
        return AppriseDelivery(
            routes, config=config, timeout_seconds=timeout_seconds, host=node_name
        )
    except ConfigError as error:
        print("invalid notification routes:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _print_results(results: Sequence[RouteTestResult]) -> None:
    for result in results:
        line = f"{'ok  ' if result.ok else 'FAIL'}  {result.label}  {result.url}"
        line = f"{line}  ({_names(result)})"
        print(line if result.ok else f"{line}: {result.detail}")


def _names(result: RouteTestResult) -> str:
    return ", ".join(s.value for s in Severity if s in result.severities)


def _as_json(result: RouteTestResult) -> dict[str, object]:
    return {
        "route": result.label,
        "url": result.url,
        "severities": [s.value for s in Severity if s in result.severities],
        "ok": result.ok,
        "error": None if result.ok else result.detail,
    }


def _routes(
    args: argparse.Namespace, settings: Settings | None
) -> tuple[list[Route], AppriseConfigText | None, float]:
    """The inline routes, the Apprise config file and the delivery timeout to test."""
    if settings is None:
        everything = frozenset(Severity)
        routes = [Route(url, everything, label=f"--url[{i}]") for i, url in enumerate(args.url)]
        return routes, None, 15.0
    section = settings.notify
    routes = routes_from_config(section, os.environ)
    return routes, config_from_section(section, os.environ), section.timeout.total_seconds()
