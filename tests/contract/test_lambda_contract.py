"""Lambda Cloud adapter against the recorded Lambda payloads (tests/fixtures/providers/lambda)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from watchdog_gpu.errors import AuthError, PermanentError
from watchdog_gpu.model import InstanceState
from watchdog_gpu.providers.parsing import lambda_cloud as parse

from .provider_harness import NOW, FakeApi, build, fixture_json, respond

BASE = "/api/v1"
TERMINATE = f"{BASE}/instance-operations/terminate"
GIB = 1024**3


def test_instances_are_normalised_field_by_field() -> None:
    api = FakeApi().add("GET", f"{BASE}/instances", respond(fixture="lambda/instances.json"))
    provider = build("lambda", api)

    active, booting = provider.list_instances(NOW)

    assert (active.provider, active.account) == ("lambda", "lambda-main")
    assert active.instance_id == "0920582c7ff041399e34823a0be62549"
    assert active.name == "train-h100"
    assert (active.state, active.raw_state) == (InstanceState.RUNNING, "active")
    assert active.interruptible is False
    assert active.compute_usd_per_hour == pytest.approx(2.49)  # its own type's price
    assert active.storage_usd_per_hour == 0.0  # local disk is part of the instance price
    assert active.disk_gb == 1024
    assert (active.gpu_name, active.gpu_count) == ("H100 (80 GB PCIe)", 1)
    assert (active.ssh_host, active.ssh_port, active.ssh_user) == ("198.51.100.2", 22, "ubuntu")
    assert active.labels == {"owner": "watchdog-test"}
    assert active.public_ports == ()
    assert active.provider_gpu_util_percent is None
    assert active.observed_at == NOW

    assert booting.instance_id == "ddaedf1b7a0e41ac981711504493b242"
    assert (booting.state, booting.raw_state) == (InstanceState.STARTING, "booting")
    # Billing begins once the instance passes its health checks: no compute while booting.
    assert booting.compute_usd_per_hour == 0.0
    assert (booting.ssh_host, booting.ssh_port, booting.ssh_user) == (None, None, None)
    assert (booting.gpu_name, booting.gpu_count) == ("A10 (24 GB PCIe)", 1)
    assert booting.labels == {}


def test_an_account_without_instances_lists_none() -> None:
    api = FakeApi().add("GET", f"{BASE}/instances", respond(fixture="lambda/instances_empty.json"))

    assert build("lambda", api).list_instances(NOW) == ()


def test_the_instance_of_a_single_instance_answer_parses() -> None:
    answer = fixture_json("lambda/instance_single.json")
    assert isinstance(answer, dict)
    instance = parse.parse_instance(answer["data"], account="a", now=NOW)

    assert (instance.instance_id, instance.state) == (
        "0920582c7ff041399e34823a0be62549",
        InstanceState.RUNNING,
    )


def test_the_account_is_all_unknown_and_costs_no_request() -> None:
    api = FakeApi()
    provider = build("lambda", api)

    account = provider.get_account(NOW)

    assert (account.provider, account.account, account.observed_at) == (
        "lambda",
        "lambda-main",
        NOW,
    )
    assert account.balance_usd is None
    assert account.spend_usd_per_hour is None
    assert account.spend_limit_usd_per_hour is None
    assert account.autopay_enabled is None
    assert api.requests == []


def test_filesystems_bill_per_gib_used_and_say_whether_they_are_mounted() -> None:
    api = FakeApi().add("GET", f"{BASE}/file-systems", respond(fixture="lambda/file_systems.json"))
    provider = build("lambda", api)

    mounted, unmounted = provider.list_volumes(NOW)

    assert (mounted.volume_id, mounted.name, mounted.attached) == (
        "398578a2336b49079e74043f0bd2cfe8",
        "ckpts-us-east",
        True,
    )
    assert mounted.size_gb == pytest.approx(412.317)
    assert mounted.usd_per_hour == pytest.approx(384 * 0.20 / 720)
    assert (unmounted.name, unmounted.attached) == ("old-datasets", False)
    assert unmounted.usd_per_hour == pytest.approx(1024 * 0.20 / 720)
    assert unmounted.created_at == datetime(2025, 6, 2, 8, 30, tzinfo=UTC)


def test_ssh_keys_are_listed_with_their_names() -> None:
    api = FakeApi().add("GET", f"{BASE}/ssh-keys", respond(fixture="lambda/ssh_keys.json"))

    (key,) = build("lambda", api).list_ssh_keys()

    assert (key.key_id, key.name) == ("ddf9a910ceb744a0bb95242cbba6cb50", "ops-laptop")
    assert key.public_key.endswith("ops@laptop")


def test_terminate_posts_the_instance_id() -> None:
    api = FakeApi().add("POST", TERMINATE, respond(fixture="lambda/terminate_ok.json"))
    provider = build("lambda", api)

    provider.destroy("0920582c7ff041399e34823a0be62549")

    assert json.loads(api.requests[0].content) == {
        "instance_ids": ["0920582c7ff041399e34823a0be62549"]
    }


def test_terminating_an_instance_that_does_not_exist_is_success() -> None:
    api = FakeApi().add(
        "POST", TERMINATE, respond(404, fixture="lambda/error_instance_not_found.json")
    )

    build("lambda", api).destroy("0920582c7ff041399e34823a0be62549")

    assert len(api.requests) == 1


def test_a_404_without_the_does_not_exist_code_never_passes_for_a_kill() -> None:
    api = FakeApi().add(
        "POST", TERMINATE, respond(404, {"error": {"code": "global/not-found", "message": "x"}})
    )

    with pytest.raises(PermanentError, match="terminate refused: global/not-found"):
        build("lambda", api).destroy("0920582c7ff041399e34823a0be62549")


@pytest.mark.parametrize(
    ("status", "fixture", "message"),
    [
        (401, "lambda/error_invalid_api_key.json", "API key was invalid"),
        (403, "lambda/error_account_inactive.json", "Your account is inactive."),
    ],
)
def test_auth_failures_are_auth_errors_after_one_request(
    status: int, fixture: str, message: str
) -> None:
    api = FakeApi().add("GET", f"{BASE}/instances", respond(status, fixture=fixture))

    with pytest.raises(AuthError, match=message):
        build("lambda", api).list_instances(NOW)
    assert len(api.requests) == 1


def test_lambda_cannot_stop_and_says_so_without_calling() -> None:
    api = FakeApi()
    provider = build("lambda", api)

    assert provider.supports_stop is False
    with pytest.raises(PermanentError, match="cannot be stopped"):
        provider.stop("0920582c7ff041399e34823a0be62549")
    assert api.requests == []


def test_the_terminate_answer_lists_the_terminated_ids() -> None:
    assert parse.parse_terminated_ids(fixture_json("lambda/terminate_ok.json")) == (
        "0920582c7ff041399e34823a0be62549",
    )
