from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.rules.base import SalvageConfig
from watchdog_gpu.salvage import SalvageRefused, fill_template, salvage

NOW = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)


def snapshot(**overrides: object) -> InstanceSnapshot:
    fields: dict[str, object] = {
        "provider": "vast",
        "account": "vast-main",
        "instance_id": "9001",
        "name": "train",
        "state": InstanceState.RUNNING,
        "raw_state": "running",
        "observed_at": NOW,
        "ssh_host": "ssh4.vast.ai",
        "ssh_port": 22051,
        "ssh_user": "root",
    }
    fields.update(overrides)
    return InstanceSnapshot(**fields)  # type: ignore[arg-type]


def test_placeholders_are_filled_from_validated_fields() -> None:
    command = [
        "rsync",
        "-e",
        "ssh -p {ssh_port}",
        "{ssh_user}@{ssh_host}:/workspace/",
        "out/{instance_id}",
    ]
    assert fill_template(command, snapshot()) == [
        "rsync",
        "-e",
        "ssh -p 22051",
        "root@ssh4.vast.ai:/workspace/",
        "out/9001",
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        {"ssh_host": "host; rm -rf /"},
        {"ssh_host": "$(reboot)"},
        {"ssh_user": "root --oProxyCommand=x"},
        {"instance_id": "../../etc"},
        {"ssh_port": 0},
        {"ssh_host": None},
    ],
)
def test_hostile_or_missing_values_refuse_the_command(overrides: dict[str, object]) -> None:
    with pytest.raises(SalvageRefused):
        fill_template(
            ["scp", "{ssh_user}@{ssh_host}:{ssh_port}", "{instance_id}"], snapshot(**overrides)
        )


def test_the_instance_name_can_never_be_a_placeholder() -> None:
    with pytest.raises(SalvageRefused, match="unknown placeholder"):
        fill_template(["echo", "{name}"], snapshot(name="$(rm -rf /)"))


def test_a_real_command_that_succeeds_is_reported_ok() -> None:
    config = SalvageConfig(command=[sys.executable, "-c", "print('saved {instance_id}')"])
    result = salvage(config, snapshot())
    assert result.ok
    assert "saved 9001" in result.detail


def test_a_failing_command_is_reported_with_its_exit_status() -> None:
    config = SalvageConfig(command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    result = salvage(config, snapshot())
    assert not result.ok
    assert result.exit_status == 3


def test_a_command_that_hangs_is_killed_at_the_timeout() -> None:
    config = SalvageConfig(
        command=[sys.executable, "-c", "import time; time.sleep(30)"],
        timeout=timedelta(seconds=0.5),
    )
    result = salvage(config, snapshot())
    assert not result.ok
    assert "timed out" in result.detail


def test_a_missing_program_is_a_failure_not_a_crash() -> None:
    result = salvage(SalvageConfig(command=["/nonexistent/rsync"]), snapshot())
    assert not result.ok
    assert "could not start" in result.detail


def test_no_command_means_nothing_to_salvage() -> None:
    assert salvage(SalvageConfig(), snapshot()).ok
