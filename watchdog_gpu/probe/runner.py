"""The seam between the prober and whatever runs the remote command.

The real implementation is :class:`watchdog_gpu.probe.ssh.ParamikoRunner`; the simulator plugs in
a fake that renders dmon text from its world. This module imports no I/O library, so the
simulator and the unit tests can use the prober without paramiko.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import InstanceRef, ProbeStatus
from watchdog_gpu.probe.command import CommandResult
from watchdog_gpu.probe.stream_buffer import StreamHealth, StreamRead


@dataclass(frozen=True, slots=True)
class SshTarget:
    """Where and as whom to log in for one instance. ``account``/``instance_id`` key the host-key
    pin and the kept connection; host/port/user only say where the instance is right now."""

    account: str
    instance_id: str
    host: str
    port: int
    user: str = "root"

    @property
    def ref(self) -> InstanceRef:
        return InstanceRef(self.account, self.instance_id)

    @property
    def endpoint(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


class CommandRunner(Protocol):
    """Runs one command on one instance.

    ``run`` returns a :class:`CommandResult` whenever the command was started; a failure to get
    that far raises :class:`watchdog_gpu.errors.ProbeError` whose ``status`` is a ``ProbeStatus``
    value (unreachable, auth_failed, host_key_changed, timeout). It must be safe to call from
    several threads for different instances.
    """

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult: ...


class StreamSource(Protocol):
    """Keeps a long-lived dmon stream open per host and buffers its rows (the streaming probe:
    :class:`watchdog_gpu.probe.streams.StreamManager` over paramiko; the simulator's fake).

    ``sync`` is called once per probe round with every host to watch: it starts streams for new
    targets (never blocking on a host) and stops the others. ``take`` returns what arrived for a
    host since its previous take, or ``None`` when the host is probed in burst mode (the command
    was refused, or burst mode is configured): the prober then runs the burst command.
    ``health`` is every host's current :class:`StreamHealth` (``status``, metrics).
    """

    def sync(self, targets: Sequence[SshTarget]) -> None: ...

    def take(self, ref: InstanceRef) -> StreamRead | None: ...

    def health(self) -> Mapping[InstanceRef, StreamHealth]: ...


@runtime_checkable
class ConnectionKeeper(Protocol):
    """A runner that keeps connections open between probes (optional for fakes)."""

    def close_except(self, keep: Collection[InstanceRef]) -> None:
        """Close every kept connection whose instance is not in ``keep``."""
        ...

    def close_instance(self, ref: InstanceRef) -> None:
        """Close the kept connection of one instance, if any."""
        ...


class AccountRunners:
    """A runner that sends each target to its account's runner (each account has its own SSH
    key and login user). A target of an account without a runner fails as ``auth_failed``:
    there is no key to log in with."""

    def __init__(self, runners: Mapping[str, CommandRunner]) -> None:
        self._runners = dict(runners)

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult:
        runner = self._runners.get(target.account)
        if runner is None:
            raise ProbeError(
                f"no SSH key is configured for account {target.account}",
                status=ProbeStatus.AUTH_FAILED.value,
            )
        return runner.run(target, command, deadline_seconds)

    def open_channel(self, target: SshTarget, command: str) -> Any:
        """The account's runner's ``open_channel`` (the streaming probe's sessions)."""
        runner = self._runners.get(target.account)
        opener = getattr(runner, "open_channel", None)
        if opener is None:
            raise ProbeError(
                f"no SSH key is configured for account {target.account}",
                status=ProbeStatus.AUTH_FAILED.value,
            )
        return opener(target, command)

    def close_except(self, keep: Collection[InstanceRef]) -> None:
        for runner in self._runners.values():
            if isinstance(runner, ConnectionKeeper):
                runner.close_except(keep)

    def close_instance(self, ref: InstanceRef) -> None:
        runner = self._runners.get(ref.account)
        if isinstance(runner, ConnectionKeeper):
            runner.close_instance(ref)
