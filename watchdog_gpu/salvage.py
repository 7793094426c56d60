"""Salvage before destroy: a configured local command run with a timeout before a destroy.

The command is an argument list from the configuration (never a shell string). Its placeholders
are filled only with validated values, so nothing a provider or a user on the rental host controls
(an instance name, a label) can reach it:

``{ssh_host}``   a host name or an IPv4/IPv6 address (checked character by character)
``{ssh_port}``   an integer 1–65535
``{ssh_user}``   a POSIX user name
``{instance_id}``, ``{account}``, ``{provider}``   letters, digits and ``._-`` only

A placeholder whose value is missing or fails validation makes the salvage fail before anything
runs; what happens then is the rule's ``on_failure`` policy.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from string import Formatter

from watchdog_gpu.call_policy import SalvageSpec
from watchdog_gpu.model import InstanceSnapshot

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_SAFE_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$")
_SAFE_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PLACEHOLDERS = ("ssh_host", "ssh_port", "ssh_user", "instance_id", "account", "provider")
OUTPUT_LIMIT = 2000  # characters of the command's output kept in the audit record


@dataclass(frozen=True, slots=True)
class SalvageResult:
    ok: bool
    detail: str
    exit_status: int | None = None


class SalvageRefused(ValueError):
    """The template cannot be filled safely; the command is not run."""


def fill_template(command: Sequence[str], snapshot: InstanceSnapshot) -> list[str]:
    """The argument list with placeholders filled from validated snapshot fields.

    Raises :class:`SalvageRefused` for an unknown placeholder or a value that fails validation.
    """
    values = _validated_values(snapshot)
    filled = []
    for argument in command:
        for _, name, _, _ in Formatter().parse(argument):
            if name is None:
                continue
            if name not in PLACEHOLDERS:
                raise SalvageRefused(f"unknown placeholder {{{name}}} in salvage command")
            if values.get(name) is None:
                raise SalvageRefused(f"no safe value for {{{name}}} on this instance")
        filled.append(argument.format_map(values))
    return filled


def _validated_values(snapshot: InstanceSnapshot) -> dict[str, str | None]:
    def checked(value: str | None, pattern: re.Pattern[str]) -> str | None:
        return value if value is not None and pattern.fullmatch(value) else None

    port = snapshot.ssh_port
    return {
        "ssh_host": checked(snapshot.ssh_host, _SAFE_HOST),
        "ssh_port": str(port) if port is not None and 0 < port < 65536 else None,
        "ssh_user": checked(snapshot.ssh_user, _SAFE_USER),
        "instance_id": checked(snapshot.instance_id, _SAFE_ID),
        "account": checked(snapshot.account, _SAFE_ID),
        "provider": checked(snapshot.provider, _SAFE_ID),
    }


CommandRunner = Callable[[list[str], float], tuple[int, str]]
"""Runs an argument list with a timeout in seconds; returns (exit status, combined output).
Raises ``subprocess.TimeoutExpired`` on timeout and ``OSError`` when the program cannot start."""


def run_local_command(arguments: list[str], timeout_seconds: float) -> tuple[int, str]:
    """The real runner: no shell, output captured, killed at the timeout."""
    completed = subprocess.run(
        arguments,
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return completed.returncode, (completed.stdout + completed.stderr)


def salvage(
    config: SalvageSpec,
    snapshot: InstanceSnapshot,
    runner: CommandRunner = run_local_command,
) -> SalvageResult:
    """Run the salvage command for ``snapshot``; never raises."""
    if not config.command:
        return SalvageResult(ok=True, detail="no salvage command configured")
    try:
        arguments = fill_template(config.command, snapshot)
    except SalvageRefused as error:
        return SalvageResult(ok=False, detail=f"refused: {error}")
    timeout = config.timeout.total_seconds()
    try:
        status, output = runner(arguments, timeout)
    except subprocess.TimeoutExpired:
        return SalvageResult(ok=False, detail=f"timed out after {timeout:.0f}s")
    except OSError as error:
        return SalvageResult(ok=False, detail=f"could not start {arguments[0]!r}: {error}")
    tail = output[-OUTPUT_LIMIT:]
    if status != 0:
        return SalvageResult(ok=False, detail=f"exit status {status}: {tail}", exit_status=status)
    return SalvageResult(ok=True, detail=tail, exit_status=0)
