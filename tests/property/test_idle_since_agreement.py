"""Property: ``status``, the Prometheus gauge and the idle rule report the same idle-since.

Over random observation histories of one instance — idle and busy stretches, heartbeat blips
(listed ``unknown`` or missing from a listing), stops, reboots, SSH gaps, point or streamed
samples, a provider that gives its start time or not — the idle rule's clock
(``rules/idle_clock.current_idle``, what ``idle_gpu`` acts on), ``status``'s GPU column
(``commands/gpu_activity``) and ``watchdog_gpu_instance_state_seconds{state="idle"}``
(``metrics/gauges.state_times``) give every instance the same idle-since, or all none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.rules.builders import at, fleet, instance, span
from watchdog_gpu.commands.gpu_activity import gpu_activity
from watchdog_gpu.fleet import InstanceView
from watchdog_gpu.metrics.gauges import state_times
from watchdog_gpu.model import GpuSample, InstanceState, ProbeOutcome, ProbeStatus, Verdict
from watchdog_gpu.rules import idle_gpu
from watchdog_gpu.rules.idle_clock import current_idle
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.store.observations import ABSENT_RAW_STATE

ACCOUNT, INSTANCE = "vast-main", "9001"
MINUTE = timedelta(minutes=1)

# What a stretch of minutes looks like: the listing's state, and whether the GPUs are probed
# (and busy) in it.
KINDS = ("idle", "busy", "ssh_gap", "unknown", "absent", "stopped", "reboot")
LISTED = {
    "idle": InstanceState.RUNNING,
    "busy": InstanceState.RUNNING,
    "ssh_gap": InstanceState.RUNNING,
    "unknown": InstanceState.UNKNOWN,
    "absent": InstanceState.GONE,
    "stopped": InstanceState.STOPPED,
    "reboot": InstanceState.STARTING,
}


@dataclass(frozen=True)
class History:
    view: InstanceView
    now: datetime
    config: IdleGpuConfig


@st.composite
def stretches(draw: st.DrawFn) -> tuple[str, int]:
    kind = draw(st.sampled_from(KINDS))
    most = {"unknown": 3, "absent": 2, "reboot": 4, "stopped": 20}.get(kind, 40)
    return kind, draw(st.integers(1, most))


@st.composite
def histories(draw: st.DrawFn) -> History:
    gpus = draw(st.integers(1, 2))
    streamed = draw(st.booleans())
    gives_start = draw(st.booleans())
    every = draw(st.sampled_from((1, 2, 4)))  # minutes between probes
    plan = [("busy", draw(st.integers(0, 10)))]
    plan += draw(st.lists(stretches(), min_size=1, max_size=12))
    minutes: list[str] = [kind for kind, length in plan for _ in range(length)]
    states: list[InstanceState] = []
    samples: list[GpuSample] = []
    probes: list[ProbeOutcome] = []
    container_start: datetime | None = None
    started_at: datetime | None = None
    previous: InstanceState | None = None
    for minute, kind in enumerate(minutes):
        moment = at(minute)
        state = LISTED[kind]
        if state is InstanceState.RUNNING and previous in (
            None,
            InstanceState.STOPPED,
            InstanceState.STARTING,
        ):
            container_start = moment - timedelta(seconds=20)  # a new container
        if state is InstanceState.STOPPED:
            container_start = None
        states.append(state)
        # Vast lists no uptime while a host is not running: the latest start is the last one.
        started_at = container_start if gives_start and state is InstanceState.RUNNING else None
        previous = state
        if kind in ("idle", "busy") and minute % every == 0:
            sm = 80.0 if kind == "busy" else 0.0
            login = kind == "idle" and draw(st.integers(0, 30)) == 0
            probes.append(
                ProbeOutcome(
                    account=ACCOUNT,
                    instance_id=INSTANCE,
                    at=moment,
                    status=ProbeStatus.OK,
                    duration_seconds=1.0,
                    interactive_login=login,
                )
            )
            samples.extend(
                GpuSample(
                    account=ACCOUNT,
                    instance_id=INSTANCE,
                    at=moment,
                    gpu_index=gpu,
                    verdict=Verdict.BUSY if sm else Verdict.IDLE,
                    sm=sm,
                    mem=0.0,
                    enc=0.0,
                    dec=0.0,
                    covers_from=moment - every * MINUTE + timedelta(seconds=1)
                    if streamed
                    else None,
                )
                for gpu in range(gpus)
            )
    spans = []
    first = 0
    for index in range(1, len(states) + 1):
        if index == len(states) or states[index] is not states[first]:
            state = states[first]
            spans.append(
                span(
                    state,
                    at(first),
                    at(index - 1),
                    compute=0.5 if state is not InstanceState.UNKNOWN else None,
                    raw_state=ABSENT_RAW_STATE if state is InstanceState.GONE else None,
                )
            )
            first = index
    if spans[-1].state is InstanceState.GONE:  # gone for good: listed again for the view
        spans.append(span(InstanceState.RUNNING, at(len(states)), at(len(states))))
    view = instance(
        *spans,
        account=ACCOUNT,
        instance_id=INSTANCE,
        provider="vast",
        gpu_count=gpus,
        started_at=started_at,
        samples=samples,
        probes=probes,
    )
    idle = timedelta(minutes=draw(st.integers(5, 30)))
    config = IdleGpuConfig(
        idle=idle,
        arm_after=timedelta(minutes=draw(st.integers(0, 20))),
        warn_before=idle / 2,
        max_sample_gap=timedelta(minutes=draw(st.sampled_from((2, 3, 5)))),
    )
    now = view.latest.observed_at + timedelta(seconds=draw(st.integers(0, 300)))
    return History(view, now, config)


def _gauge_since(history: History) -> datetime | None:
    rows = [
        row
        for row in state_times(fleet(history.now, history.view), history.now, history.config)
        if row.state == "idle"
    ]
    if not rows:
        return None
    (row,) = rows
    return history.now - timedelta(seconds=row.seconds)


def _assert_all_agree(history: History) -> datetime | None:
    view, now, config = history.view, history.now, history.config
    episode = current_idle(view, now, config.clock_settings)
    core = episode.start if episode is not None else None
    assert gpu_activity(view, now, config.clock_settings).idle_since == core
    gauge = _gauge_since(history)
    if core is None:
        assert gauge is None
    else:
        assert gauge is not None
        assert abs(gauge - min(core, now)) < timedelta(milliseconds=1)
    for finding in idle_gpu.evaluate(fleet(now, view), now, config):
        assert core is not None
        assert finding.evidence["idle_since"] == core.isoformat()
        assert finding.episode_started_at == core
    return core


@settings(max_examples=300, deadline=None)
@given(histories())
def test_status_the_gauge_and_the_rule_report_the_same_idle_since(history: History) -> None:
    _assert_all_agree(history)


def test_after_a_29_minute_ssh_gap_all_three_show_the_restarted_clock() -> None:
    # Busy until minute 30, idle and probed until 60, no probe for 29 minutes, idle again.
    samples = [
        GpuSample(ACCOUNT, INSTANCE, at(m), 0, Verdict.BUSY if m < 30 else Verdict.IDLE, sm=s)
        for m in [*range(0, 61), *range(89, 101)]
        for s in [80.0 if m < 30 else 0.0]
    ]
    view = instance(
        span(InstanceState.RUNNING, at(0), at(100)),
        account=ACCOUNT,
        instance_id=INSTANCE,
        samples=samples,
        started_at=at(-1),
    )
    history = History(view, at(100), IdleGpuConfig())
    assert _assert_all_agree(history) == at(89)  # restarted after the blind stretch
    shown = gpu_activity(view, at(100), IdleGpuConfig().clock_settings)
    assert shown.activity_text == "idle 11 min"
