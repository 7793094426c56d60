"""A fake SSH runner that answers the probe's command from the simulated world.

It implements :class:`watchdog_gpu.probe.runner.CommandRunner`: given the prober's fixed command,
it renders what a real host would print — the begin marker, ``nvidia-smi dmon -s u -o T`` text for
the last N samples (read from the world at the instants dmon would have sampled), the
compute-apps CSV, ``nvidia-smi -L``, the remote clock and terminal input times, the end marker —
so the real output splitter and the real dmon parser run, exactly as against a real host.

The scenario's ``ssh`` modes become what paramiko would have reported: ``down`` and ``refused``
→ unreachable, ``hostkey_changed`` → host key changed (no command runs), ``garbage`` → output
that is no probe output at all. A non-running instance does not answer SSH.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.command import (
    BEGIN_MARKER,
    END_MARKER,
    GPUS_MARKER,
    CommandResult,
    exit_marker,
)
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.sim.dmon_render import render_compute_apps, render_dmon, render_gpu_list
from watchdog_gpu.sim.gpu import GpuState
from watchdog_gpu.sim.records import UnknownInstanceError
from watchdog_gpu.sim.world import SimulatedWorld

_SAMPLES = re.compile(r"-d (\d+) -c (\d+)")
_COMPUTE_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")
_GARBAGE = "Segmentation fault (core dumped)\n\x1b[31m*** stack smashing detected ***\n"


class SimulatedSshRunner:
    """The probe's view of simulated hosts; thread-safe because the world is."""

    def __init__(self, world: SimulatedWorld) -> None:
        self.world = world

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult:
        match = _SAMPLES.search(command)
        interval, samples = (int(match.group(1)), int(match.group(2))) if match else (1, 10)
        # The instants dmon would have sampled, oldest first; the last one is now.
        steps_back = [timedelta(seconds=interval * (samples - 1 - i)) for i in range(samples)]
        try:
            now, frames = self.world.gpu_history(target.account, target.instance_id, steps_back)
        except UnknownInstanceError as error:
            raise ProbeError(
                f"{target.endpoint}: connection refused", status=ProbeStatus.UNREACHABLE.value
            ) from error
        now_state = frames[-1]
        if not now_state.running or now_state.ssh in ("down", "refused"):
            what = "connection refused" if now_state.ssh == "refused" else "timed out"
            raise ProbeError(f"{target.endpoint}: {what}", status=ProbeStatus.UNREACHABLE.value)
        if now_state.ssh == "hostkey_changed":
            raise ProbeError(
                f"{target.endpoint}: host key changed", status=ProbeStatus.HOST_KEY_CHANGED.value
            )
        if now_state.ssh == "garbage":
            return CommandResult(stdout=_GARBAGE, stderr="", exit_status=0, timed_out=False)
        instants = [now - step for step in steps_back]
        return CommandResult(
            stdout=_output(now, instants, frames), stderr="", exit_status=0, timed_out=False
        )


def _output(now: datetime, instants: list[datetime], frames: list[GpuState]) -> str:
    """The probe command's whole output for ``frames`` (one GPU state per dmon instant)."""
    current = frames[-1]
    dmon = render_dmon(frames, date_time=instants)
    apps = render_compute_apps(current, _COMPUTE_FIELDS, header=False, units=False)
    epoch = int(now.timestamp())
    ttys = [str(epoch - 30)] if current.interactive_login else []
    return "".join(
        (
            f"{BEGIN_MARKER}\n",
            dmon,
            exit_marker("DMON", 0) + "\n",
            apps,
            exit_marker("APPS", 0) + "\n",
            render_gpu_list(current),
            f"{GPUS_MARKER}\n",
            f"{epoch}\n",
            "".join(f"{tty}\n" for tty in ttys),
            f"{END_MARKER}\n",
        )
    )
