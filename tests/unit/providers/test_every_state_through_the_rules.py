"""Every documented provider state × interruptible flag, from a real-shaped payload through the
parser to the rules (docs/providers.md has the tables this walks).

For each: the state we read, the $/h it bills, and that no rule plans a stop or destroy of an
instance that bills nothing or whose state is not ours to judge (``unknown``) — even with every
destructive rule armed and overdue, its GPUs idle for two days and the budget blown.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.unit.providers.rows import fixture_row, vast_bid_row
from tests.unit.rules.builders import T0, probes_every, samples
from watchdog_gpu.fleet import AccountView, FleetView, InstanceView
from watchdog_gpu.model import (
    ActionKind,
    InstanceSnapshot,
    InstanceState,
    ProbeStatus,
    StateSpan,
    billed_usd_per_hour,
)
from watchdog_gpu.providers.parsing import lambda_cloud, runpod, vast
from watchdog_gpu.rules import evaluate_all
from watchdog_gpu.rules.base import RuleConfig
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig
from watchdog_gpu.rules.paused_interruptible import PausedInterruptibleConfig
from watchdog_gpu.rules.stopped_disk import StoppedDiskConfig

S = InstanceState
HELD = timedelta(days=2)  # how long the instance has been in the state
NOW = T0 + HELD

# The Vast bid fixture row: bid 0.22 below min_bid 0.31, storage 0.0142222 $/h.
VAST_COMPUTE, VAST_STORAGE = 0.22, 0.0142222
VAST_RUNNING = VAST_COMPUTE + VAST_STORAGE

# RunPod's on-demand running fixture pod: $0.69/h, a 50 GB volume and a 20 GB container disk.
RUNPOD_COMPUTE = 0.69
RUNPOD_UP_STORAGE = (50 * 0.10 + 20 * 0.10) / 730
RUNPOD_STOPPED_STORAGE = 50 * 0.20 / 730

# (provider, raw state, interruptible) → (our state, billed $/h; None = unknown)
CASES: dict[tuple[str, str, bool], tuple[InstanceState, float | None]] = {}
for bid in (False, True):
    CASES |= {
        ("vast", "null", bid): (S.STARTING, VAST_STORAGE),
        ("vast", "created", bid): (S.STARTING, VAST_STORAGE),
        ("vast", "loading", bid): (S.STARTING, VAST_STORAGE),
        # outbid (a losing bid, its user wants it running) or waiting for the GPU
        ("vast", "scheduling", bid): (S.PAUSED if bid else S.STARTING, VAST_STORAGE),
        ("vast", "running", bid): (S.RUNNING, VAST_RUNNING),
        ("vast", "stopped", bid): (S.STOPPED, VAST_STORAGE),  # intended "stopped": ambiguous
        ("vast", "exited", bid): (S.STOPPED, VAST_STORAGE),  # the contract stopped too
        # the container died, the contract still holds (and bills) its GPU: blind, not a disk
        ("vast", "exited/contract-running", bid): (S.RUNNING, VAST_RUNNING),
        # stopped by Vast itself (its user still wants it running), bid not known to lose
        ("vast", "stopped/by-vast", bid): (S.STOPPED, VAST_STORAGE),
        # a losing bid, but Vast reports a fault: not read as outbid
        ("vast", "stopped/by-vast-error", bid): (S.STOPPED, VAST_STORAGE),
        # a known losing bid while its user wants it running: outbid
        ("vast", "stopped/outbid", bid): (S.PAUSED if bid else S.STOPPED, VAST_STORAGE),
        ("vast", "frozen", bid): (S.RUNNING, VAST_RUNNING),
        ("vast", "rebooting", bid): (S.STARTING, VAST_RUNNING),
        ("vast", "offline", bid): (S.UNKNOWN, None),
        ("vast", "unknown", bid): (S.UNKNOWN, None),
        ("runpod", "CREATED", bid): (S.STARTING, RUNPOD_COMPUTE + RUNPOD_UP_STORAGE),
        ("runpod", "RUNNING", bid): (S.RUNNING, RUNPOD_COMPUTE + RUNPOD_UP_STORAGE),
        ("runpod", "RUNNING/no-runtime", bid): (S.STARTING, RUNPOD_COMPUTE + RUNPOD_UP_STORAGE),
        ("runpod", "RESTARTING", bid): (S.STARTING, RUNPOD_COMPUTE + RUNPOD_UP_STORAGE),
        ("runpod", "EXITED", bid): (S.STOPPED, RUNPOD_STOPPED_STORAGE),  # spot too
        ("runpod", "PAUSED", bid): (S.UNKNOWN, None),
        ("runpod", "DEAD", bid): (S.UNKNOWN, None),
        ("runpod", "TERMINATED", bid): (S.GONE, 0.0),
    }
# Lambda has no interruptible instances.
CASES |= {
    ("lambda", "booting", False): (S.STARTING, 0.0),
    ("lambda", "active", False): (S.RUNNING, 2.49),
    # failed Lambda's health checks: not up, never judged idle, alerted as unknown
    ("lambda", "unhealthy", False): (S.UNKNOWN, None),
    ("lambda", "terminating", False): (S.GONE, 0.0),
    ("lambda", "terminated", False): (S.GONE, 0.0),
    ("lambda", "preempted", False): (S.UNKNOWN, None),
}


def _parse(provider: str, raw: str, interruptible: bool) -> InstanceSnapshot:
    if provider == "vast":
        status, _, variant = raw.partition("/")
        row = vast_bid_row(
            actual_status=None if status == "null" else status,
            intended_status={"stopped": "stopped", "frozen": "frozen"}.get(raw, "running"),
            is_bid=interruptible,
        )
        if variant == "contract-running":
            row["cur_state"] = "running"
        if variant == "by-vast":
            row["min_bid"] = None  # the outbid test is unknown
        if variant == "by-vast-error":
            row["status_msg"] = "Error: host fault, instance stopped"
        return vast.parse_instance(row, account="acct", now=NOW)
    if provider == "runpod":
        pod = fixture_row("runpod/myself_pods.json", "data", "myself", "pods", 0)
        status, _, flag = raw.partition("/")
        pod["desiredStatus"] = status
        pod["podType"] = "INTERRUPTABLE" if interruptible else "RESERVED"
        if status != "RUNNING" or flag == "no-runtime":
            pod["runtime"] = None
        return runpod.parse_pod(pod, account="acct", now=NOW)
    row = fixture_row("lambda/instances.json", "data", 0)
    row["status"] = raw
    return lambda_cloud.parse_instance(row, account="acct", now=NOW)


def _view(snapshot: InstanceSnapshot) -> FleetView:
    """The instance held in its state for two days, its GPUs sampled idle the whole time."""
    span = StateSpan(
        state=snapshot.state,
        raw_state=snapshot.raw_state,
        first_seen=T0,
        last_seen=NOW,
        compute_usd_per_hour=snapshot.compute_usd_per_hour,
        storage_usd_per_hour=snapshot.storage_usd_per_hour,
    )
    view = InstanceView(
        latest=snapshot,
        first_seen=T0,
        spans=(span,),
        samples=tuple(
            samples(
                T0,
                NOW,
                every=timedelta(minutes=5),
                account=snapshot.account,
                instance_id=snapshot.instance_id,
            )
        ),
        probes=tuple(
            replace(probe, account=snapshot.account, instance_id=snapshot.instance_id)
            for probe in probes_every(T0, NOW, ProbeStatus.OK, every=timedelta(minutes=5))
        ),
    )
    account = AccountView(
        account=snapshot.account, provider=snapshot.provider, latest=None, last_poll_ok_at=NOW
    )
    return FleetView(now=NOW, instances={snapshot.ref.key: view}, accounts={"acct": account})


ARMED: dict[str, RuleConfig] = {
    "paused_interruptible": PausedInterruptibleConfig(after=timedelta(minutes=30)),
    "stopped_disk": StoppedDiskConfig(after=timedelta(hours=1)),
    "max_runtime": MaxRuntimeConfig(limit=timedelta(hours=1)),
    "budget": BudgetConfig(daily_usd=0.01, max_usd_per_hour=0.001),
}


@pytest.mark.parametrize(("provider", "raw", "interruptible"), sorted(CASES), ids=str)
def test_each_state_reads_bills_and_is_only_acted_on_when_it_bills_and_is_known(
    provider: str, raw: str, interruptible: bool
) -> None:
    expected_state, expected_rate = CASES[(provider, raw, interruptible)]

    snapshot = _parse(provider, raw, interruptible)
    rate = billed_usd_per_hour(
        snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
    )

    assert snapshot.state is expected_state
    assert snapshot.interruptible is (interruptible and provider != "lambda")
    if expected_rate is None:
        assert rate is None
    else:
        assert rate == pytest.approx(expected_rate)

    findings = evaluate_all(_view(snapshot), NOW, ARMED)
    acting = {f.rule for f in findings if f.action in (ActionKind.STOP, ActionKind.DESTROY)}
    if snapshot.state in (S.UNKNOWN, S.GONE) or rate == 0:
        assert acting == set(), f"{provider} {raw}: not billing or not ours to judge"
    else:
        # Something billing for two days past every limit is acted on by some rule.
        assert acting, f"{provider} {raw}: billing ${rate}/h and nothing acts"
    if snapshot.state is not S.PAUSED:
        assert "paused_interruptible" not in {f.rule for f in findings}


@pytest.mark.parametrize("raw", ["null", "created", "loading", "rebooting"])
def test_a_loading_spot_instance_is_never_destroyed_by_paused_interruptible(raw: str) -> None:
    snapshot = _parse("vast", raw, interruptible=True)

    findings = evaluate_all(_view(snapshot), NOW, ARMED)

    assert snapshot.state is S.STARTING
    assert "paused_interruptible" not in {f.rule for f in findings}
