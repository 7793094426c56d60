"""The SQLite store as the probe's host-key store: pins survive in the database, per instance."""

from __future__ import annotations

import pytest

from tests.integration.conftest import FakeGpu
from tests.integration.probe_helpers import FAST_SPEC, FAST_TIMEOUTS, NOW, instance_on, probe
from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.hostkeys import HostKeyStore
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys
from watchdog_gpu.store import Store

pytestmark = pytest.mark.sshd


def prober_with(server: SshServer, pins: HostKeyStore) -> tuple[ParamikoRunner, Prober]:
    keys = load_private_keys(SshCredentials(private_key_path=server.client.path))
    runner = ParamikoRunner(keys, pins, timeouts=FAST_TIMEOUTS)
    return runner, Prober(runner, clock=SystemClock(), host_key_store=pins, spec=FAST_SPEC)


def test_the_store_pins_on_first_contact_and_alarms_on_a_changed_key(
    own_server: SshServer, store: Store
) -> None:
    FakeGpu(own_server.state_dir).replay(
        "dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt"
    )
    runner, prober = prober_with(own_server, store)
    with runner:
        assert probe(prober, instance_on(own_server)).status is ProbeStatus.OK
        assert store.get_pinned_host_key("acct", "i-1") == (
            "ssh-ed25519",
            own_server.host_key_base64,
        )

        own_server.restart(new_host_key=True)
        changed = probe(prober, instance_on(own_server))
        assert changed.status is ProbeStatus.HOST_KEY_CHANGED
        assert changed.samples == ()

        gone = instance_on(own_server)
        prober.forget_instance(gone.account, gone.instance_id)
        assert store.get_pinned_host_key("acct", "i-1") is None
        assert prober.probe_all([gone], NOW)[0].status is ProbeStatus.OK
