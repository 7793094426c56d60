"""The probe against a real sshd when SSH fails: every failure is an outcome, none is idle."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import FakeGpu
from tests.integration.probe_helpers import (
    assert_failed_without_samples,
    instance_on,
    make_prober,
    make_runner,
    probe,
)
from tests.integration.sshd import SshServer, free_port, write_ed25519_key
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import ProbeOutcome, ProbeStatus, Verdict
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.sshkeys import SshCredentials

pytestmark = pytest.mark.sshd

IDLE_DMON = "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt"


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    clock = SystemClock()
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        if check():
            return True
        clock.sleep(0.02)
    return False


def test_a_connection_dropped_mid_stream_is_unreachable_never_idle(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON, hang_seconds=60)
    store = MemoryHostKeyStore()
    outcomes: list[ProbeOutcome] = []
    with make_runner(ssh_server, store) as runner:
        prober = make_prober(runner, store)
        worker = threading.Thread(
            target=lambda: outcomes.append(probe(prober, instance_on(ssh_server)))
        )
        worker.start()
        # Idle rows are already on the wire when the session dies.
        assert wait_for(lambda: fake_gpu.is_hanging("dmon"))
        assert ssh_server.kill_sessions() > 0
        worker.join(30)

        (outcome,) = outcomes
        assert outcome.status in {ProbeStatus.UNREACHABLE, ProbeStatus.TIMEOUT}
        assert_failed_without_samples(outcome)

        # The dead connection is not reused: the next probe reconnects and works.
        fake_gpu.reset()
        fake_gpu.replay("dmon", IDLE_DMON)
        assert probe(prober, instance_on(ssh_server)).status is ProbeStatus.OK


def test_a_changed_host_key_is_an_alert_and_no_command_runs(
    own_server: SshServer, tmp_path: Path
) -> None:
    fake = FakeGpu(own_server.state_dir)
    fake.replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    with make_runner(own_server, store) as runner:
        prober = make_prober(runner, store)
        assert probe(prober, instance_on(own_server)).status is ProbeStatus.OK
        pinned = store.get_pinned_host_key("acct", "i-1")
        assert pinned == ("ssh-ed25519", own_server.host_key_base64)
        calls_before = len(fake.calls())

        own_server.restart(new_host_key=True)
        outcome = probe(prober, instance_on(own_server))

    assert outcome.status is ProbeStatus.HOST_KEY_CHANGED
    assert "SHA256:" in outcome.detail
    assert_failed_without_samples(outcome)
    assert len(fake.calls()) == calls_before  # nvidia-smi never ran on the impostor
    assert store.get_pinned_host_key("acct", "i-1") == pinned  # the pin is not replaced


def test_a_reused_address_does_not_alarm_for_a_different_instance(own_server: SshServer) -> None:
    FakeGpu(own_server.state_dir).replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    with make_runner(own_server, store) as runner:
        prober = make_prober(runner, store)
        assert probe(prober, instance_on(own_server, "old")).status is ProbeStatus.OK

        # The provider hands the same IP:port to another machine for another instance.
        own_server.restart(new_host_key=True)
        outcome = probe(prober, instance_on(own_server, "new"))

    assert outcome.status is ProbeStatus.OK
    assert store.get_pinned_host_key("acct", "new") == ("ssh-ed25519", own_server.host_key_base64)


def test_a_gone_instance_loses_its_pin(own_server: SshServer) -> None:
    FakeGpu(own_server.state_dir).replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    with make_runner(own_server, store) as runner:
        prober = make_prober(runner, store)
        instance = instance_on(own_server)
        assert probe(prober, instance).status is ProbeStatus.OK

        prober.forget_instance("acct", "i-1")
        own_server.restart(new_host_key=True)

        assert probe(prober, instance).status is ProbeStatus.OK


def test_a_wrong_client_key_is_auth_failed_and_pins_nothing(
    ssh_server: SshServer, fake_gpu: FakeGpu, tmp_path: Path
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    stranger = tmp_path / "stranger_key"
    write_ed25519_key(stranger)
    store = MemoryHostKeyStore()
    credentials = SshCredentials(private_key_path=stranger)
    with make_runner(ssh_server, store, credentials) as runner:
        outcome = probe(make_prober(runner, store), instance_on(ssh_server))

    assert outcome.status is ProbeStatus.AUTH_FAILED
    assert_failed_without_samples(outcome)
    assert fake_gpu.calls() == []
    assert store.get_pinned_host_key("acct", "i-1") is None


def test_a_closed_port_is_unreachable(ssh_server: SshServer) -> None:
    store = MemoryHostKeyStore()
    with make_runner(ssh_server, store) as runner:
        outcome = probe(make_prober(runner, store), instance_on(ssh_server, port=free_port()))

    assert outcome.status is ProbeStatus.UNREACHABLE
    assert_failed_without_samples(outcome)


def test_one_failing_instance_does_not_stop_the_others(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", IDLE_DMON)
    store = MemoryHostKeyStore()
    instances = [
        instance_on(ssh_server, "up-1"),
        instance_on(ssh_server, "down", port=free_port()),
        instance_on(ssh_server, "up-2"),
    ]
    with make_runner(ssh_server, store) as runner:
        outcomes = make_prober(runner, store).probe_all(instances, instances[0].observed_at)

    statuses = {outcome.instance_id: outcome.status for outcome in outcomes}
    assert statuses == {
        "up-1": ProbeStatus.OK,
        "down": ProbeStatus.UNREACHABLE,
        "up-2": ProbeStatus.OK,
    }
    for outcome in outcomes:
        if outcome.status is not ProbeStatus.OK:
            assert not any(sample.verdict is Verdict.IDLE for sample in outcome.samples)
