"""Shared helpers for the SSH probe integration tests (real sshd on 127.0.0.1)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import InstanceSnapshot, InstanceState, ProbeOutcome, Verdict
from watchdog_gpu.probe.command import ProbeCommandSpec
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.ssh import ParamikoRunner, SshTimeouts
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
# Quick probes: the fake prints at once; two samples keep the remote timeouts short.
FAST_SPEC = ProbeCommandSpec(samples=2, interval_seconds=1, startup_allowance_seconds=2)
FAST_TIMEOUTS = SshTimeouts(
    connect_seconds=5, banner_seconds=5, handshake_seconds=5, auth_seconds=5
)


def instance_on(
    server: SshServer,
    instance_id: str = "i-1",
    *,
    name: str = "train",
    port: int | None = None,
    gpu_count: int | None = 1,
) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="acct",
        instance_id=instance_id,
        name=name,
        state=InstanceState.RUNNING,
        raw_state="running",
        observed_at=NOW,
        ssh_host="127.0.0.1",
        ssh_port=server.port if port is None else port,
        ssh_user="root",
        gpu_count=gpu_count,
    )


def make_runner(
    server: SshServer,
    store: MemoryHostKeyStore,
    credentials: SshCredentials | None = None,
) -> ParamikoRunner:
    keys = load_private_keys(credentials or SshCredentials(private_key_path=server.client.path))
    return ParamikoRunner(keys, store, timeouts=FAST_TIMEOUTS)


def make_prober(
    runner: ParamikoRunner,
    store: MemoryHostKeyStore,
    *,
    spec: ProbeCommandSpec = FAST_SPEC,
    deadline_seconds: float | None = None,
) -> Prober:
    return Prober(
        runner,
        clock=SystemClock(),
        host_key_store=store,
        spec=spec,
        deadline_seconds=deadline_seconds,
    )


def probe(prober: Prober, instance: InstanceSnapshot) -> ProbeOutcome:
    (outcome,) = prober.probe_all([instance], NOW)
    return outcome


def assert_failed_without_samples(outcome: ProbeOutcome) -> None:
    """The promise: a failed probe yields no samples at all, so nothing can read as idle."""
    assert not any(sample.verdict is Verdict.IDLE for sample in outcome.samples)
    assert outcome.samples == ()
