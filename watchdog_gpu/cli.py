"""The ``watchdog-gpu`` command line.

Each sub-command is a module under ``watchdog_gpu/commands/`` exposing ``register(subparsers)``,
which sets ``handler`` (parsed namespace → exit code); adding one is a module plus a line in
``COMMANDS``. Only the chosen command's module is imported: the others get a placeholder parser
with their summary, so start-up stays fast. Exit codes: ``docs/commands.md``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import select
import sys
from collections.abc import Sequence

from watchdog_gpu import __version__

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DMON_ERROR = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

# Command name → (module under watchdog_gpu.commands, one-line summary). A module may register
# several commands (protect/unprotect); its register() adds all of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "completion": ("completion", "print a shell completion script (bash, zsh or fish)"),
    "config": ("config_check", "inspect the configuration"),
    "db": ("db", "manage the database"),
    "demo": ("demo", "a simulated night against the built-in provider simulator (under a minute)"),
    "dmon": ("dmon", "read nvidia-smi dmon output"),
    "doctor": ("doctor", "check every account read-only: key, instances, $/h, SSH, rules"),
    "events": ("events", "the audit history of decisions and actions"),
    "fuse": ("fuse", "the blast-radius fuse"),
    "notify": ("notify", "notification routes"),
    "once": ("once", "run one full tick (poll, probe, decide, act, notify) and exit"),
    "protect": ("protect", "never stop or destroy an instance"),
    "unprotect": ("protect", "remove a protection added with protect"),
    "report": ("report", "spend by account, instance or day, and what stops and destroys saved"),
    "run": ("run", "run the daemon (until SIGTERM/SIGINT)"),
    "sim": ("sim", "the simulated provider world"),
    "simulate": ("simulate", "run your rules against a scripted scenario on a virtual clock"),
    "snooze": ("snooze", "postpone destructive actions for an instance"),
    "status": ("status", "accounts and instances with state, $/h, idle time, pending actions"),
}

_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def summary(command: str) -> str:
    """The one-line ``--help`` summary of ``command`` (from ``COMMANDS``)."""
    return COMMANDS[command][1]


def doc_paragraph(doc: str | None, index: int = 1) -> str | None:
    """Paragraph ``index`` of a module docstring as ``--help`` text: RST ````literal```` becomes
    ```literal``` (argparse prints text as it is)."""
    if not doc:
        return None
    paragraphs = doc.split("\n\n")
    if index >= len(paragraphs):
        return None
    return _RST_LITERAL.sub(r"`\1`", paragraphs[index])


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names (the first word that is not an option), if any."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None, *, everything: bool = True) -> argparse.ArgumentParser:
    """The argument parser. With ``everything`` every command's module registers its parser (for
    completion and tests); otherwise only ``command``'s does and the others are placeholders
    carrying their summary."""
    parser = argparse.ArgumentParser(
        prog="watchdog-gpu",
        description=(
            "Watch rented GPUs (Vast.ai, RunPod, Lambda) and stop idle, paused, stopped or "
            "over-budget instances from billing; never kill a busy one."
        ),
    )
    parser.add_argument("--version", action="version", version=f"watchdog-gpu {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen_module = COMMANDS[command][0] if command in COMMANDS else None
    registered: set[str] = set()
    for name, (module_name, text) in COMMANDS.items():
        if module_name in registered:
            continue
        if everything or module_name == chosen_module:
            module = importlib.import_module(f"watchdog_gpu.commands.{module_name}")
            module.register(subparsers)
            registered.add(module_name)
        else:
            subparsers.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen command, return its exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_command(words), everything=False)
    args = parser.parse_args(words)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = handler(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return _quiet_after_closed_pipe()
    return code


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end was closed (``… | head -1``), as opposed to a
    broken socket inside the command."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(), or stdout is not a real file
        return False


def _quiet_after_closed_pipe() -> int:
    """stdout's reader took what it wanted and left (``watchdog-gpu events --json | head -1``):
    end without a traceback, with the exit status of a program killed by SIGPIPE (what ``cat``
    gives in the same pipeline). stdout is pointed at /dev/null first so the interpreter's final
    flush does not raise and print again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
