"""``watchdog-gpu doctor`` in the default stream probe mode against real sshds on 127.0.0.1:
it waits for each stream's first outcome, says why a probe failed (connection refused,
permission denied, host key changed against the daemon's pinned keys), and a failed probe makes
the report DEGRADED (exit 1) as ``once`` does.
A failing API holds it for its capped retry budget, not the daemon's 60 s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli_support import freeze_clock, isolate, run
from tests.integration.conftest import FakeGpu, serving_sshd
from tests.integration.sshd import SshServer, free_port
from tests.integration.store_builders import T0
from tests.support.sim_world import ServedWorld, served_world
from watchdog_gpu.doctor.check import DOCTOR_RETRY_BUDGET
from watchdog_gpu.store import sqlite_url
from watchdog_gpu.wiring import open_store

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

HEADER = (
    "# gpu     sm    mem    enc    dec    jpg    ofa \n"
    "# Idx      %      %      %      %      %      % \n"
)
ONE_BUSY_GPU = HEADER + f"{0:>5}" + "".join(f"{value:>7}" for value in (97, 40, 0, 0, 0, 0)) + " \n"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


@pytest.fixture
def other_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """An sshd that does not know the account's key (its own client key only)."""
    workdir = tmp_path_factory.mktemp("other-sshd")
    workdir.chmod(0o700)
    yield from serving_sshd(workdir)


def scenario(tmp_path: Path, ports: dict[str, int]) -> Path:
    instances = "".join(
        f"""
[[accounts.instances]]
id = "{instance_id}"
name = "box-{instance_id}"
gpu_name = "H100 SXM"
gpu_count = 1
compute_usd_per_hour = 2.0
ssh_host = "127.0.0.1"
ssh_port = {port}
events = [{{ at = "0s", state = "running", gpu_util = 90 }}]
"""
        for instance_id, port in ports.items()
    )
    path = tmp_path / "scenario.toml"
    path.write_text(
        'name = "doctor-ssh"\nstart = "2026-03-02T20:00:00Z"\nduration = "1h"\n'
        '[[accounts]]\nname = "vast-a"\nprovider = "vast"\napi_key = "sim-vast-a"\n'
        "balance_usd = 100.0\n" + instances,
        encoding="utf-8",
    )
    return path


def config(tmp_path: Path, served: ServedWorld, key: Path) -> Path:
    path = tmp_path / "watchdog-gpu.toml"
    path.write_text(
        f'[watchdog]\nmode = "monitor"\ndatabase_url = "sqlite:///{tmp_path / "wd.db"}"\n'
        '[probe]\nconnect_timeout = "5s"\nbanner_timeout = "5s"\nauth_timeout = "5s"\n'
        '[[accounts]]\nname = "vast-a"\nprovider = "vast"\napi_key = "sim-vast-a"\n'
        f'api_url = "{served.url("vast")}"\n'
        f'[accounts.ssh]\nuser = "root"\nkey_file = "{key}"\n',
        encoding="utf-8",
    )
    return path


def test_doctor_waits_for_the_streams_and_says_why_ssh_failed(
    ssh_server: SshServer,
    fake_gpu: FakeGpu,
    other_sshd: SshServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_gpu.replay("dmon", text=ONE_BUSY_GPU, pace_seconds=0.5, forever=0)
    ports = {"1001": ssh_server.port, "1002": free_port(), "1003": other_sshd.port}
    with served_world(scenario(tmp_path, ports)) as served:
        path = config(tmp_path, served, ssh_server.client.path)
        as_json = run(capsys, "doctor", "--config", str(path), "--json")
        text = run(capsys, "doctor", "--config", str(path))

    assert as_json.code == 1, as_json.err
    report = json.loads(as_json.out)
    assert report["healthy"] is False
    probes = {i["instance_id"]: i["probe"] for i in report["accounts"][0]["instances"]}
    assert (probes["1001"]["status"], probes["1001"]["verdict"]) == ("ok", "busy")
    assert probes["1001"]["reason"] == ""
    assert probes["1002"]["status"] == "unreachable"
    assert probes["1002"]["reason"].startswith("connection refused: ")
    assert probes["1003"]["status"] == "auth_failed"
    assert probes["1003"]["reason"].startswith("permission denied: ")
    assert "the stream is starting" not in as_json.out

    assert text.code == 1
    assert "connection refused: " in text.out
    assert "permission denied: " in text.out
    assert text.out.splitlines()[-1].startswith("result: DEGRADED: 2 probe(s) failed")


def test_a_failing_api_holds_doctor_for_the_capped_retry_budget_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens on the API's port: every call fails at once and is retried (the default
    # budget, 60 s, is not set in the file). The retries sleep on the virtual clock.
    clock = freeze_clock(monkeypatch)
    path = tmp_path / "watchdog-gpu.toml"
    path.write_text(
        f'[watchdog]\nmode = "monitor"\ndatabase_url = "sqlite:///{tmp_path / "wd.db"}"\n'
        "[probe]\nenabled = false\n"
        '[[accounts]]\nname = "vast-a"\nprovider = "vast"\napi_key = "k"\n'
        f'api_url = "http://127.0.0.1:{free_port()}"\n',
        encoding="utf-8",
    )
    started = clock.monotonic()

    result = run(capsys, "doctor", "--config", str(path), "--json")

    assert result.code == 1
    assert json.loads(result.out)["accounts"][0]["key"]["status"] == "unreachable"
    waited = clock.monotonic() - started
    assert 0 < waited <= DOCTOR_RETRY_BUDGET.total_seconds()


def test_doctor_says_host_key_changed_when_the_host_differs_from_the_daemons_pin(
    ssh_server: SshServer,
    fake_gpu: FakeGpu,
    other_sshd: SshServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The daemon's database (the configuration's) pinned 1001 to another host's key — the
    # watchdog's known_hosts, per instance — and 1002 to the key its sshd really offers.
    fake_gpu.replay("dmon", text=ONE_BUSY_GPU, pace_seconds=0.5, forever=0)
    daemon = open_store(sqlite_url(tmp_path / "wd.db"))
    daemon.pin_host_key("vast-a", "1001", "ssh-ed25519", other_sshd.host_key_base64, T0)
    daemon.pin_host_key("vast-a", "1002", "ssh-ed25519", ssh_server.host_key_base64, T0)
    pinned = daemon.pinned_host_keys()
    ports = {"1001": ssh_server.port, "1002": ssh_server.port, "1003": ssh_server.port}
    with served_world(scenario(tmp_path, ports)) as served:
        path = config(tmp_path, served, ssh_server.client.path)
        as_json = run(capsys, "doctor", "--config", str(path), "--json")
        text = run(capsys, "doctor", "--config", str(path))

    assert as_json.code == 1, as_json.err
    report = json.loads(as_json.out)
    probes = {i["instance_id"]: i["probe"] for i in report["accounts"][0]["instances"]}
    assert probes["1001"]["status"] == "host_key_changed"
    assert probes["1001"]["reason"].startswith("host key changed: ")
    assert (probes["1002"]["status"], probes["1002"]["verdict"]) == ("ok", "busy")
    assert (probes["1003"]["status"], probes["1003"]["verdict"]) == ("ok", "busy")  # first use
    assert "SSH host keys: checked against the 2 the daemon pinned in " in as_json.out
    assert text.code == 1
    assert "host key changed: " in text.out
    assert text.out.splitlines()[-1].startswith("result: DEGRADED: 1 probe(s) failed")
    # Read only: the daemon's pins are as they were, 1003's first use was not pinned there.
    assert daemon.pinned_host_keys() == pinned
    daemon.engine.dispose()
