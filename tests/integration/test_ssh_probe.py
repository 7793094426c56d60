"""The probe against a real sshd whose nvidia-smi replays real captures: what each output means."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import FakeGpu
from tests.integration.probe_helpers import (
    assert_failed_without_samples,
    instance_on,
    make_prober,
    make_runner,
    probe,
)
from tests.integration.sshd import SshServer
from watchdog_gpu.model import ProbeStatus, Verdict
from watchdog_gpu.probe.command import ProbeCommandSpec
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober

pytestmark = pytest.mark.sshd


@pytest.fixture
def prober(ssh_server: SshServer) -> Iterator[Prober]:
    store = MemoryHostKeyStore()
    with make_runner(ssh_server, store) as runner:
        yield make_prober(runner, store)


def test_an_idle_gpu_yields_idle_samples(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.OK
    assert len(outcome.samples) == 5
    assert {sample.verdict for sample in outcome.samples} == {Verdict.IDLE}
    assert {sample.sm for sample in outcome.samples} == {0.0}


def test_a_busy_gpu_yields_busy_samples(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_1gpu_load_h100_590.48.01.txt")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.OK
    assert {sample.verdict for sample in outcome.samples} == {Verdict.BUSY}
    assert {sample.sm for sample in outcome.samples} == {100.0}


def test_the_remote_host_runs_exactly_the_fixed_command(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt")

    probe(prober, instance_on(ssh_server, name="$(touch /tmp/pwned); reboot"))

    assert fake_gpu.calls() == [
        "dmon -s u -o T -d 1 -c 2",
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits",
        "-L",
    ]


def test_a_mig_gpu_under_load_is_busy_through_its_compute_processes(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_mig_idle_h100_590.48.01.txt")
    fake_gpu.replay("apps", "fakebin/apps_mig_load_h100_DERIVED.txt")
    fake_gpu.replay("gpus", "nvidia-smi/list_gpus_mig_h100_590.48.01.txt")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.OK
    assert {sample.verdict for sample in outcome.samples} == {Verdict.BUSY}
    assert {sample.sm for sample in outcome.samples} == {None}


def test_a_mig_gpu_without_processes_is_unknown_not_idle(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_mig_idle_h100_590.48.01.txt")
    fake_gpu.replay("gpus", "nvidia-smi/list_gpus_mig_h100_590.48.01.txt")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.OK
    assert {sample.verdict for sample in outcome.samples} == {Verdict.UNKNOWN}


@pytest.mark.parametrize(
    "case",
    [
        ("err_driver_not_loaded.txt", 9, "driver_not_loaded"),
        ("err_no_libnvidia_ml_550.163.01.txt", 12, "nvml_missing"),
        ("err_nvml_mismatch_460.txt", 18, "version_mismatch"),
        ("err_device_handle_unknown_error.txt", 15, "gpu_lost"),
        ("err_no_devices.txt", 6, "no_devices"),
    ],
)
def test_an_nvidia_smi_error_is_a_driver_error_without_samples(
    ssh_server: SshServer,
    fake_gpu: FakeGpu,
    prober: Prober,
    case: tuple[str, int, str],
) -> None:
    fixture, exit_status, kind = case
    fake_gpu.replay("dmon", f"nvidia-smi/{fixture}", exit_status=exit_status)

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.DRIVER_ERROR
    assert outcome.detail.startswith(f"{kind}:")
    assert_failed_without_samples(outcome)


def test_garbage_output_is_unparseable_without_samples(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", text="Segmentation fault\n\x00\x1b[31mlorem ipsum 1 2 3\n")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.UNPARSEABLE
    assert_failed_without_samples(outcome)


def test_a_header_without_rows_is_unparseable_not_idle(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", text="# gpu     sm    mem\n# Idx      %      %\n")

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.UNPARSEABLE
    assert_failed_without_samples(outcome)


def test_a_hung_nvidia_smi_is_ended_by_the_remote_timeout(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay(
        "dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt", hang_seconds=120
    )

    outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.TIMEOUT
    assert "on the host" in outcome.detail
    assert_failed_without_samples(outcome)


def test_a_hung_command_is_ended_by_the_local_deadline(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay(
        "dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt", hang_seconds=120
    )
    store = MemoryHostKeyStore()
    slow_remote = ProbeCommandSpec(samples=2, startup_allowance_seconds=60)
    with make_runner(ssh_server, store) as runner:
        prober = make_prober(runner, store, spec=slow_remote, deadline_seconds=1.5)

        outcome = probe(prober, instance_on(ssh_server))

    assert outcome.status is ProbeStatus.TIMEOUT
    assert "1.5 s deadline" in outcome.detail
    assert_failed_without_samples(outcome)


def test_a_hung_compute_apps_query_costs_only_the_process_evidence(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_mig_idle_h100_590.48.01.txt")
    fake_gpu.replay("apps", "fakebin/apps_mig_load_h100_DERIVED.txt", hang_seconds=120)
    store = MemoryHostKeyStore()
    quick_queries = ProbeCommandSpec(samples=2, query_timeout_seconds=1)
    with make_runner(ssh_server, store) as runner:
        outcome = probe(make_prober(runner, store, spec=quick_queries), instance_on(ssh_server))

    # The dmon rows are real; without a finished process list a MIG GPU stays unknown.
    assert outcome.status is ProbeStatus.OK
    assert {sample.verdict for sample in outcome.samples} == {Verdict.UNKNOWN}


def test_gpus_the_provider_reports_but_dmon_does_not_show_are_unknown(
    ssh_server: SshServer, fake_gpu: FakeGpu, prober: Prober
) -> None:
    fake_gpu.replay("dmon", "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt")

    outcome = probe(prober, instance_on(ssh_server, gpu_count=2))

    verdicts = {(sample.gpu_index, sample.verdict) for sample in outcome.samples}
    assert verdicts == {(0, Verdict.IDLE), (1, Verdict.UNKNOWN)}
