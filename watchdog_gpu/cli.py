"""The ``watchdog-gpu`` command line.

Each sub-command lives in its own module under ``watchdog_gpu/commands/`` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` (a function taking the parsed
``argparse.Namespace`` and returning an exit code). Adding a command is one module plus one line in
``COMMAND_MODULES``.

Exit codes:
    0  success
    1  a runtime failure (a provider, the database, the network) the message explains
    2  bad usage or invalid configuration (every problem is listed)
    3  ``dmon parse``: the file holds an nvidia-smi error text, not samples
    130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from watchdog_gpu import __version__

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DMON_ERROR = 3
EXIT_INTERRUPTED = 130

# One line per command module; each module's register() adds its sub-command(s).
COMMAND_MODULES: tuple[str, ...] = (
    "config_check",
    "db",
    "demo",
    "dmon",
    "events",
    "fuse",
    "notify",
    "once",
    "protect",
    "run",
    "sim",
    "simulate",
    "snooze",
    "status",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="watchdog-gpu",
        description=(
            "Watch rented GPUs (Vast.ai, RunPod, Lambda) and stop idle, paused, stopped or "
            "over-budget instances from billing; never kill a busy one."
        ),
    )
    parser.add_argument("--version", action="version", version=f"watchdog-gpu {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(f"watchdog_gpu.commands.{module_name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen command, return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code
