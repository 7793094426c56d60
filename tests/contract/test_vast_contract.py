"""Vast.ai adapter against the recorded Vast payloads (tests/fixtures/providers/vast)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

import pytest

from watchdog_gpu.errors import AuthError, NotFoundError, PermanentError
from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.providers.parsing import vast as parse
from watchdog_gpu.providers.scrub import REDACTED, scrub_payload

from .provider_harness import NOW, FakeApi, build, fixture_json, respond

V0_LIST = "/api/v0/instances/"
V1_LIST = "/api/v1/instances/"


def _v0_only(fixture: str) -> FakeApi:
    """An API where the paginated list is not served and v0 answers with ``fixture``."""
    return (
        FakeApi()
        .add("GET", V1_LIST, respond(404, {"detail": "Not Found"}))
        .add("GET", V0_LIST, respond(fixture=fixture))
    )


def _by_id(instances: tuple[InstanceSnapshot, ...]) -> dict[str, InstanceSnapshot]:
    return {instance.instance_id: instance for instance in instances}


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_running_instances_are_normalised_field_by_field() -> None:
    provider = build("vast", _v0_only("vast/instances_running.json"))

    instances = _by_id(provider.list_instances(NOW))

    assert list(instances) == ["50079779", "50090759", "50112004"]
    busy = instances["50079779"]
    assert busy.provider == "vast"
    assert busy.account == "vast-main"
    assert busy.name == "llm-train-a"
    assert busy.state is InstanceState.RUNNING
    assert busy.raw_state == "running"
    assert busy.observed_at == NOW
    assert busy.interruptible is False
    assert busy.compute_usd_per_hour == pytest.approx(0.62)
    assert busy.storage_usd_per_hour == pytest.approx(0.0208333)
    assert busy.disk_gb == 100.0
    assert (busy.gpu_name, busy.gpu_count) == ("RTX 4090", 2)
    assert (busy.ssh_host, busy.ssh_port, busy.ssh_user) == ("ssh5.vast.ai", 39778, "root")
    assert busy.created_at == _ts(1764680000.12)
    assert busy.started_at == (NOW - timedelta(seconds=round(412.7 * 60))).replace(microsecond=0)
    assert busy.public_ports == (22, 8080)
    assert busy.provider_gpu_util_percent is None

    idle = instances["50090759"]
    assert (idle.name, idle.state, idle.gpu_name, idle.gpu_count) == (
        "notebook-ben",
        InstanceState.RUNNING,
        "RTX A6000",
        1,
    )
    assert idle.compute_usd_per_hour == pytest.approx(0.47)
    assert idle.storage_usd_per_hour == pytest.approx(0.0222222)
    assert (idle.ssh_host, idle.ssh_port) == ("ssh8.vast.ai", 10442)
    assert idle.public_ports == (22,)

    # gpu_util 0.0 with gpu_temp 0.0 is "host not reporting": it must never read as an idle GPU.
    silent = instances["50112004"]
    assert silent.state is InstanceState.RUNNING
    assert silent.provider_gpu_util_percent is None
    assert silent.compute_usd_per_hour == pytest.approx(0.19)
    assert silent.storage_usd_per_hour == pytest.approx(0.0055556)
    assert (silent.ssh_host, silent.ssh_port) == ("ssh2.vast.ai", 21884)


def test_a_stopped_bid_instance_vast_cannot_tell_from_a_user_stop_is_a_stopped_disk() -> None:
    # cur_state == intended_status == next_state == "stopped" with a bid below min_bid: outbid
    # (dstack's reading) or stopped by the user after the market moved. Vast cannot say which;
    # the less destructive reading (stopped_disk, 24 h) wins over paused (30 min).
    provider = build("vast", _v0_only("vast/instances_outbid_paused.json"))

    (paused,) = provider.list_instances(NOW)

    assert paused.instance_id == "50133412"
    assert paused.name == "sweep-lr-17"
    assert paused.state is InstanceState.STOPPED
    assert paused.raw_state == "stopped (bid < min_bid)"
    assert paused.interruptible is True
    # Compute is the contract's own rate (dph_total − storage), never the offer's search price.
    assert paused.compute_usd_per_hour == pytest.approx(0.22)
    assert paused.storage_usd_per_hour == pytest.approx(0.0142222)
    assert paused.disk_gb == 64.0
    assert (paused.gpu_name, paused.gpu_count) == ("RTX 4090", 1)
    assert (paused.ssh_host, paused.ssh_port) == ("ssh3.vast.ai", 33412)
    assert paused.started_at is None
    assert paused.public_ports == ()


def test_a_user_stopped_on_demand_instance_is_stopped_with_its_disk_rate() -> None:
    provider = build("vast", _v0_only("vast/instances_stopped_with_disk.json"))

    (stopped,) = provider.list_instances(NOW)

    assert stopped.instance_id == "49877120"
    assert stopped.state is InstanceState.STOPPED
    assert stopped.interruptible is False
    assert stopped.compute_usd_per_hour == pytest.approx(1.6)
    assert stopped.storage_usd_per_hour == pytest.approx(0.0555556)
    assert stopped.disk_gb == 200.0
    assert (stopped.gpu_name, stopped.gpu_count) == ("H100 SXM", 1)
    assert (stopped.ssh_host, stopped.ssh_port) == ("ssh6.vast.ai", 37120)
    assert stopped.created_at == _ts(1764200000.0)


def test_the_mixed_listing_maps_each_state_including_a_bid_waiting_for_its_gpu() -> None:
    provider = build("vast", _v0_only("vast/instances_mixed.json"))

    instances = _by_id(provider.list_instances(NOW))

    assert {key: value.state for key, value in instances.items()} == {
        "50079779": InstanceState.RUNNING,
        "50090759": InstanceState.RUNNING,
        "50133412": InstanceState.STOPPED,  # outbid or user stop: cannot tell, so stopped
        "50133590": InstanceState.PAUSED,  # scheduling below min_bid: an outbid bid waiting
        "49877120": InstanceState.STOPPED,
    }
    assert instances["50133590"].raw_state == "scheduling (intended running, bid < min_bid)"
    assert instances["50133590"].interruptible is True
    # Paused bills only the disk; the contract's rate is kept for humans.
    assert instances["50133590"].compute_usd_per_hour == pytest.approx(0.22)


def test_an_empty_account_lists_no_instances() -> None:
    provider = build("vast", _v0_only("vast/instances_empty.json"))

    assert provider.list_instances(NOW) == ()


def test_the_paginated_list_is_followed_to_the_last_page() -> None:
    api = FakeApi().add(
        "GET",
        V1_LIST,
        respond(fixture="vast/instances_v1_page1.json"),
        respond(fixture="vast/instances_v1_page2.json"),
    )
    provider = build("vast", api)

    instances = provider.list_instances(NOW)

    assert [instance.instance_id for instance in instances] == [
        "49877120",
        "50079779",
        "50090759",
    ]
    first, second = (parse_qs(request.url.query.decode()) for request in api.requests)
    assert first["limit"] == ["25"]
    assert "after_token" not in first
    assert json.loads(first["order_by"][0]) == [{"col": "id", "dir": "asc"}]
    assert second["after_token"] == ["eyJ2YWx1ZXMiOiB7ImlkIjogNTAwNzk3Nzl9fQ=="]
    assert instances[0].state is InstanceState.STOPPED
    assert instances[2].state is InstanceState.RUNNING


def test_a_page_token_that_repeats_is_a_permanent_error_not_an_endless_loop() -> None:
    api = FakeApi().add("GET", V1_LIST, respond(fixture="vast/instances_v1_page1.json"))
    provider = build("vast", api)

    with pytest.raises(PermanentError, match="paging loop"):
        provider.list_instances(NOW)
    assert len(api.requests) == 2


def test_a_rejected_v1_filter_is_a_permanent_error_with_the_providers_reason() -> None:
    api = FakeApi().add("GET", V1_LIST, respond(400, fixture="vast/error_400_v1_filter.json"))
    provider = build("vast", api)

    with pytest.raises(PermanentError, match="dph_total is not a valid search key") as caught:
        provider.list_instances(NOW)
    assert caught.value.status_code == 400
    assert len(api.requests) == 1


def test_the_row_of_a_single_instance_answer_parses() -> None:
    answer = fixture_json("vast/instance_single.json")
    assert isinstance(answer, dict)

    single = parse.parse_instance(answer["instances"], account="a", now=NOW)

    assert (single.instance_id, single.state, single.public_ports) == (
        "50079779",
        InstanceState.RUNNING,
        (22, 8080),
    )


def test_the_account_balance_is_the_prepaid_credit_and_autopay_is_reported() -> None:
    api = FakeApi().add("GET", "/api/v0/users/current/", respond(fixture="vast/users_current.json"))
    provider = build("vast", api)

    account = provider.get_account(NOW)

    assert account.provider == "vast"
    assert account.account == "vast-main"
    assert account.observed_at == NOW
    assert account.balance_usd == pytest.approx(182.37)
    assert account.spend_usd_per_hour is None
    assert account.spend_limit_usd_per_hour is None
    assert account.autopay_enabled is True


def test_a_negative_credit_without_a_card_is_a_negative_balance_without_autopay() -> None:
    api = FakeApi().add(
        "GET", "/api/v0/users/current/", respond(fixture="vast/users_current_negative.json")
    )
    provider = build("vast", api)

    account = provider.get_account(NOW)

    assert account.balance_usd == pytest.approx(-3.42)
    assert account.autopay_enabled is False


def test_the_users_current_payload_loses_its_echoed_api_key_when_scrubbed() -> None:
    payload = fixture_json("vast/users_current.json")

    scrubbed = scrub_payload(payload)

    assert isinstance(scrubbed, dict)
    assert scrubbed["api_key"] == REDACTED
    assert scrubbed["sid"] == REDACTED
    assert "REDACTED-TEST-KEY-do-not-log" not in json.dumps(scrubbed)
    assert scrubbed["credit"] == 182.37  # nothing else changes


def test_volumes_carry_size_rate_and_whether_anything_uses_them() -> None:
    api = FakeApi().add("GET", "/api/v0/volumes", respond(fixture="vast/volumes_list.json"))
    provider = build("vast", api)

    (volume,) = provider.list_volumes(NOW)

    assert dict(api.requests[0].url.params) == {"owner": "me", "type": "all_volume"}
    assert volume.volume_id == "20118481"
    assert volume.size_gb == 500.0
    assert volume.usd_per_hour == pytest.approx(0.1388889)
    assert volume.attached is False
    assert volume.created_at == _ts(1763000000.0)


def test_ssh_keys_are_listed_with_their_comment_as_name() -> None:
    api = FakeApi().add("GET", "/api/v0/ssh/", respond(fixture="vast/ssh_keys_list.json"))
    provider = build("vast", api)

    keys = provider.list_ssh_keys()

    assert [(key.key_id, key.name) for key in keys] == [
        ("40211", "ops@laptop"),
        ("40987", "watchdog@ci"),
    ]
    assert keys[1].public_key == "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC7x1kq0 watchdog@ci"


def test_the_key_object_of_a_create_answer_parses_with_its_public_key_field() -> None:
    payload = fixture_json("vast/ssh_key_create_ok.json")
    assert isinstance(payload, dict)

    record = parse.parse_ssh_key(payload["key"], account="vast-main")

    assert record is not None
    assert (record.key_id, record.name) == ("41102", "watchdog")
    assert record.public_key.startswith("ssh-ed25519 AAAAC3")


def test_destroy_sends_delete_and_accepts_success() -> None:
    path = "/api/v0/instances/50079779/"
    api = FakeApi().add("DELETE", path, respond(fixture="vast/destroy_ok.json"))
    provider = build("vast", api)

    provider.destroy("50079779")

    (request,) = api.requests
    assert json.loads(request.content) == {}


@pytest.mark.parametrize(
    ("status", "fixture"),
    [(200, "vast/destroy_no_such_instance.json"), (404, "vast/destroy_not_found_404.json")],
)
def test_destroying_an_already_destroyed_instance_is_success(status: int, fixture: str) -> None:
    api = FakeApi().add("DELETE", "/api/v0/instances/49000001/", respond(status, fixture=fixture))
    provider = build("vast", api)

    provider.destroy("49000001")

    assert len(api.requests) == 1


def test_a_404_page_that_does_not_name_the_instance_never_passes_for_a_kill() -> None:
    api = FakeApi().add(
        "DELETE", "/api/v0/instances/1/", respond(404, "<html><title>404</title></html>")
    )
    provider = build("vast", api)

    with pytest.raises(PermanentError, match="does not say the instance is gone"):
        provider.destroy("1")


def test_a_404_saying_the_key_is_invalid_is_an_auth_error_not_an_already_gone() -> None:
    api = FakeApi().add(
        "DELETE", "/api/v0/instances/1/", respond(404, fixture="vast/error_401_invalid_key.json")
    )
    provider = build("vast", api)

    with pytest.raises(AuthError, match="Invalid user key"):
        provider.destroy("1")
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    ("status", "fixture", "message"),
    [
        (401, "vast/error_401_invalid_key.json", "Invalid user key"),
        (403, "vast/error_403_no_auth.json", "This action requires login."),
    ],
)
def test_auth_failures_are_auth_errors_after_a_single_request(
    status: int, fixture: str, message: str
) -> None:
    api = FakeApi().add("GET", V1_LIST, respond(status, fixture=fixture))
    provider = build("vast", api)

    with pytest.raises(AuthError, match=message):
        provider.list_instances(NOW)
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "fixture",
    ["vast/error_429_json.json", "vast/error_429_destroy.json", "vast/error_429_plain.txt"],
)
def test_each_vast_rate_limit_body_is_retried_then_succeeds(fixture: str) -> None:
    api = FakeApi().add(
        "DELETE",
        "/api/v0/instances/7/",
        respond(429, fixture=fixture),
        respond(fixture="vast/destroy_ok.json"),
    )
    provider = build("vast", api)

    provider.destroy("7")

    assert len(api.requests) == 2


def test_stop_puts_the_stopped_state() -> None:
    api = FakeApi().add(
        "PUT", "/api/v0/instances/50079779/", respond(fixture="vast/manage_stop_ok.json")
    )
    provider = build("vast", api)

    provider.stop("50079779")

    assert json.loads(api.requests[0].content) == {"state": "stopped"}
    assert provider.supports_stop is True


def test_stopping_a_missing_instance_is_not_found() -> None:
    api = FakeApi().add(
        "PUT",
        "/api/v0/instances/49000001/",
        respond(404, fixture="vast/destroy_not_found_404.json"),
    )
    provider = build("vast", api)

    with pytest.raises(NotFoundError):
        provider.stop("49000001")


def test_a_non_numeric_instance_id_never_reaches_the_api() -> None:
    api = FakeApi()
    provider = build("vast", api)

    with pytest.raises(PermanentError, match="not a Vast instance id"):
        provider.destroy("../users/current")
    assert api.requests == []


@pytest.mark.parametrize(
    ("fixture", "failure"),
    [
        ("vast/charges_page.json", None),
        ("vast/invoices_v1_page.json", None),
        ("vast/invoices_v1_bad_range.json", ("Invalid date range", "Invalid date range")),
    ],
)
def test_billing_envelopes_report_http_200_failures(
    fixture: str, failure: tuple[str, str] | None
) -> None:
    assert parse.failure_of(fixture_json(fixture)) == failure


def test_billing_rows_pass_through_scrubbing_unchanged() -> None:
    charges = fixture_json("vast/charges_page.json")

    assert scrub_payload(charges) == charges  # next_token and amounts are not secrets


def test_a_listing_that_reports_success_false_is_a_permanent_error() -> None:
    body = {"success": False, "error": "invalid_args", "msg": "bad", "instances": []}
    api = FakeApi().add("GET", V1_LIST, respond(200, body))
    provider = build("vast", api)

    with pytest.raises(PermanentError, match="invalid_args"):
        provider.list_instances(NOW)
