"""What the GPUs of a simulated instance are doing, as scripted.

An instance's GPU script (``gpu_util``, ``gpu_pattern``, ``enc``, ``mig``, ``ssh``,
``interactive_login`` events) is turned once into a timeline of :class:`GpuSettings`; reading the
GPUs at any instant is then a lookup, so the fake SSH runner can sample the past few seconds of a
bursty pattern the way ``nvidia-smi dmon -c N`` would have seen them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import timedelta

from watchdog_gpu.sim.scenario import GpuPattern, InstanceEvent, ScenarioInstance, SshMode

# Memory-controller load that goes with a given SM load: a plausible ratio for training jobs;
# only ``sm``/``enc``/``dec`` decide busy vs idle, ``mem`` is there for realism.
_MEM_PER_SM = 0.6


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's utilisation percentages at one instant."""

    index: int
    sm: int
    mem: int
    enc: int
    dec: int


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One compute process on one GPU (what ``--query-compute-apps`` lists)."""

    gpu_index: int
    pid: int
    name: str
    used_mib: int


@dataclass(frozen=True, slots=True)
class GpuState:
    """Everything an SSH probe of the instance would see at one instant.

    ``gpus`` is empty and ``ssh`` is ``"down"`` unless the instance is running: a starting,
    paused or stopped instance has no GPU attached and nobody answers on its SSH port.
    """

    state: str | None
    gpus: tuple[GpuReading, ...]
    mig: bool
    processes: tuple[GpuProcess, ...]
    ssh: SshMode
    interactive_login: bool

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True, slots=True)
class GpuSettings:
    """The scripted GPU behaviour in force from some offset on."""

    util: tuple[int, ...]
    pattern: GpuPattern | None = None
    pattern_since: timedelta = timedelta(0)
    enc: int = 0
    mig: bool = False
    ssh: SshMode = "up"
    interactive_login: bool = False

    def sm_at(self, offset: timedelta) -> tuple[int, ...]:
        if self.pattern is None:
            return self.util
        value = self.pattern.util_at(offset - self.pattern_since)
        return tuple(value for _ in self.util)


class GpuTimeline:
    """The scripted GPU settings of one instance over time (offsets from the scenario start)."""

    def __init__(self, instance: ScenarioInstance) -> None:
        current = GpuSettings(util=tuple(0 for _ in range(instance.gpu_count)))
        self._offsets: list[timedelta] = [timedelta(0)]
        self._settings: list[GpuSettings] = [current]
        for event in instance.events:
            changed = _settings_after(current, event, instance.gpu_count)
            if changed is not current:
                self._offsets.append(event.at)
                self._settings.append(changed)
                current = changed

    def settings_at(self, offset: timedelta) -> GpuSettings:
        position = bisect.bisect_right(self._offsets, offset) - 1
        return self._settings[max(position, 0)]


# Event fields copied as they are into the GPU settings when an event sets them.
_PLAIN_SETTINGS = ("enc", "mig", "ssh", "interactive_login")


def _settings_after(current: GpuSettings, event: InstanceEvent, gpu_count: int) -> GpuSettings:
    """``current`` changed by what ``event`` sets (``current`` itself when it sets nothing)."""
    changed = current
    if event.gpu_util is not None:
        util = event.gpu_util
        per_gpu = util if isinstance(util, tuple) else (util,) * gpu_count
        changed = replace(changed, util=per_gpu, pattern=None)
    if event.gpu_pattern is not None:
        changed = replace(changed, pattern=event.gpu_pattern, pattern_since=event.at)
    plain = {name: getattr(event, name) for name in _PLAIN_SETTINGS}
    set_now = {name: value for name, value in plain.items() if value is not None}
    return replace(changed, **set_now) if set_now else changed


def read_gpus(
    settings: GpuSettings, offset: timedelta, state: str | None, instance_key: int
) -> GpuState:
    """The probe's view of an instance in ``state`` with ``settings`` at ``offset``.

    ``instance_key`` makes process ids differ between instances (a stable small number).
    """
    if state != "running":
        return GpuState(state, (), settings.mig, (), "down", False)
    readings = []
    processes = []
    for index, sm in enumerate(settings.sm_at(offset)):
        readings.append(GpuReading(index, sm, round(sm * _MEM_PER_SM), settings.enc, 0))
        if sm > 0 or settings.enc > 0:
            name = "ffmpeg" if settings.enc > 0 and sm < 20 else "python3"
            pid = 4000 + instance_key * 100 + index
            processes.append(GpuProcess(index, pid, name, 1024 + 200 * sm))
    return GpuState(
        state,
        tuple(readings),
        settings.mig,
        tuple(processes),
        settings.ssh,
        settings.interactive_login,
    )
