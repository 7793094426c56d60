"""RunPod adapter against the recorded RunPod payloads (tests/fixtures/providers/runpod)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from watchdog_gpu.errors import NotFoundError, PermanentError, TransientError
from watchdog_gpu.model import InstanceSnapshot, InstanceState
from watchdog_gpu.providers.parsing import runpod as parse
from watchdog_gpu.providers.runpod import ACCOUNT_QUERY, PODS_QUERY
from watchdog_gpu.providers.scrub import scrub_payload

from .provider_harness import NOW, FakeApi, FakeTime, build, fixture_json, respond

GRAPHQL = "/graphql"
HOURS = 730


def _api(*, pods: str | None = None, account: str | None = None) -> FakeApi:
    api = FakeApi()
    if pods is not None:
        api.add("POST", GRAPHQL, respond(fixture=pods), body_contains="pods {")
    if account is not None:
        api.add("POST", GRAPHQL, respond(fixture=account), body_contains="clientBalance")
    return api


def _by_id(instances: tuple[InstanceSnapshot, ...]) -> dict[str, InstanceSnapshot]:
    return {instance.instance_id: instance for instance in instances}


def test_pods_are_normalised_field_by_field() -> None:
    api = _api(pods="runpod/myself_pods.json")
    provider = build("runpod", api)

    pods = _by_id(provider.list_instances(NOW))

    (request,) = api.requests
    assert json.loads(request.content) == {"query": PODS_QUERY}
    assert list(pods) == [
        "k3f9x2m7q1w8za",
        "q7w2e9r4t6y1ui",
        "z1x2c3v4b5n6m7",
        "a8s7d6f5g4h3jk",
        "w3e4r5t6y7u8io",
    ]

    busy = pods["k3f9x2m7q1w8za"]
    assert (busy.provider, busy.account, busy.name) == (
        "runpod",
        "runpod-main",
        "llm-finetune-4090",
    )
    assert (busy.state, busy.raw_state, busy.interruptible) == (
        InstanceState.RUNNING,
        "RUNNING",
        False,
    )
    assert busy.compute_usd_per_hour == pytest.approx(0.69)
    # volume 50 GB + container disk 20 GB, both $0.10/GB/month while running
    assert busy.storage_usd_per_hour == pytest.approx(70 * 0.10 / HOURS)
    assert busy.disk_gb == 70
    assert (busy.gpu_name, busy.gpu_count) == ("RTX 4090", 1)
    assert (busy.ssh_host, busy.ssh_port, busy.ssh_user) == ("195.26.233.3", 34446, "root")
    assert busy.started_at == NOW - timedelta(seconds=25118)
    assert busy.provider_gpu_util_percent == (94.0,)
    assert busy.public_ports == (22, 8888)
    assert busy.observed_at == NOW

    idle = pods["q7w2e9r4t6y1ui"]
    assert idle.state is InstanceState.RUNNING
    assert idle.compute_usd_per_hour == pytest.approx(3.28)
    assert idle.storage_usd_per_hour == pytest.approx(140 * 0.10 / HOURS)
    assert (idle.gpu_name, idle.gpu_count) == ("A100 SXM", 2)
    assert idle.provider_gpu_util_percent == (0.0, 0.0)
    assert (idle.ssh_host, idle.ssh_port) == ("203.0.113.61", 40122)

    starting = pods["z1x2c3v4b5n6m7"]
    assert starting.state is InstanceState.STARTING
    assert starting.raw_state == "RUNNING (runtime not up)"
    assert starting.compute_usd_per_hour == pytest.approx(0.44)
    assert (starting.ssh_host, starting.ssh_port, starting.ssh_user) == (None, None, None)
    assert starting.provider_gpu_util_percent is None  # no runtime: not available, not idle
    assert starting.public_ports == ()
    assert starting.started_at is None

    stopped = pods["a8s7d6f5g4h3jk"]
    assert (stopped.state, stopped.raw_state, stopped.interruptible) == (
        InstanceState.STOPPED,
        "EXITED",
        False,
    )
    # the volume bills at the doubled stopped rate; the container disk is gone
    assert stopped.storage_usd_per_hour == pytest.approx(200 * 0.20 / HOURS)
    assert stopped.disk_gb == 200
    assert stopped.compute_usd_per_hour == pytest.approx(2.69)
    assert (stopped.gpu_name, stopped.gpu_count) == ("H100 SXM", 1)

    # An EXITED spot pod: interrupted or stopped by its user, RunPod shows both alike, so it
    # is a stopped disk (24 h), not a paused interruptible (30 min).
    spot = pods["w3e4r5t6y7u8io"]
    assert (spot.state, spot.raw_state, spot.interruptible) == (
        InstanceState.STOPPED,
        "EXITED",
        True,
    )
    assert spot.storage_usd_per_hour == pytest.approx(40 * 0.20 / HOURS)
    assert spot.compute_usd_per_hour == pytest.approx(0.35)


def test_an_account_without_pods_lists_none() -> None:
    provider = build("runpod", _api(pods="runpod/myself_pods_empty.json"))

    assert provider.list_instances(NOW) == ()


def test_the_pod_of_a_single_pod_answer_parses() -> None:
    answer = fixture_json("runpod/pod_single.json")
    assert isinstance(answer, dict)

    pod = parse.parse_pod(answer["data"]["pod"], account="a", now=NOW)

    assert (pod.instance_id, pod.state, pod.provider_gpu_util_percent) == (
        "k3f9x2m7q1w8za",
        InstanceState.RUNNING,
        (94.0,),
    )


def test_the_account_reports_balance_spend_rate_and_spend_limit() -> None:
    api = _api(account="runpod/myself_account.json")
    provider = build("runpod", api)

    account = provider.get_account(NOW)

    assert json.loads(api.requests[0].content) == {"query": ACCOUNT_QUERY}
    assert (account.provider, account.account, account.observed_at) == (
        "runpod",
        "runpod-main",
        NOW,
    )
    assert account.balance_usd == pytest.approx(435.85)
    assert account.spend_usd_per_hour == pytest.approx(4.562)
    assert account.spend_limit_usd_per_hour == pytest.approx(80)
    assert account.autopay_enabled is None


def test_a_low_account_has_no_volumes_and_no_keys() -> None:
    provider = build("runpod", _api(account="runpod/myself_account_low.json"))

    assert provider.get_account(NOW).balance_usd == pytest.approx(0.73)
    assert provider.list_volumes(NOW) == ()
    assert provider.list_ssh_keys() == ()


def test_network_volumes_bill_7_cents_for_the_first_terabyte_and_5_beyond() -> None:
    provider = build("runpod", _api(account="runpod/myself_network_volumes.json"))

    volumes = provider.list_volumes(NOW)

    assert [(volume.volume_id, volume.name, volume.size_gb) for volume in volumes] == [
        ("agv6w2qcg7", "datasets-eu", 500),
        ("x9k2m5p8q1", "orphan-ckpts", 1200),
    ]
    assert volumes[0].usd_per_hour == pytest.approx(500 * 0.07 / HOURS)
    assert volumes[1].usd_per_hour == pytest.approx((1000 * 0.07 + 200 * 0.05) / HOURS)
    assert volumes[0].attached is None  # the query does not say


def test_account_keys_come_from_the_newline_separated_pubkey() -> None:
    provider = build("runpod", _api(account="runpod/myself_account.json"))

    keys = provider.list_ssh_keys()

    assert [key.name for key in keys] == ["ops@laptop", "watchdog"]
    assert all(key.public_key.startswith("ssh-ed25519 ") for key in keys)
    assert len({key.key_id for key in keys}) == 2


def test_observe_makes_two_calls_and_fills_every_part() -> None:
    api = _api(pods="runpod/myself_pods.json", account="runpod/myself_account.json")
    provider = build("runpod", api)

    observation = provider.observe(NOW)

    assert len(api.requests) == 2
    assert len(observation.instances) == 5
    assert observation.account.balance_usd == pytest.approx(435.85)
    assert [volume.volume_id for volume in observation.volumes] == ["agv6w2qcg7"]
    assert len(observation.ssh_keys) == 2
    assert observation.problems == {}


def test_stop_sends_pod_stop_for_the_pod() -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(fixture="runpod/pod_stop_ok.json"))
    provider = build("runpod", api)

    provider.stop("k3f9x2m7q1w8za")

    query = json.loads(api.requests[0].content)["query"]
    assert query == (
        'mutation { podStop(input: {podId: "k3f9x2m7q1w8za"}) '
        "{ id desiredStatus lastStatusChange } }"
    )


def test_terminate_answering_null_is_success() -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(fixture="runpod/pod_terminate_ok.json"))
    provider = build("runpod", api)

    provider.destroy("k3f9x2m7q1w8za")

    query = json.loads(api.requests[0].content)["query"]
    assert query == 'mutation { podTerminate(input: {podId: "k3f9x2m7q1w8za"}) }'


def test_terminating_a_pod_that_is_already_gone_is_success() -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(fixture="runpod/pod_terminate_not_found.json"))
    provider = build("runpod", api)

    provider.destroy("gone0000000000")

    assert len(api.requests) == 1


def test_an_http_404_from_the_graphql_endpoint_is_not_a_terminated_pod() -> None:
    api = FakeApi().add(
        "POST", GRAPHQL, respond(404, fixture="runpod/rest_v1_error_not_found.json")
    )
    provider = build("runpod", api)

    with pytest.raises(PermanentError, match="Pod not found"):
        provider.destroy("k3f9x2m7q1w8za")


def test_a_pod_id_that_could_break_out_of_the_query_never_reaches_the_api() -> None:
    api = FakeApi()
    provider = build("runpod", api)

    with pytest.raises(PermanentError, match="not a RunPod pod id"):
        provider.destroy('x"}) { evil }')
    assert api.requests == []


@pytest.mark.parametrize(
    ("fixture", "message"),
    [
        ("runpod/graphql_error.json", "no longer any instances available"),
        ("runpod/graphql_error_spot_resume.json", "Cannot resume a spot pod"),
    ],
)
def test_graphql_errors_in_a_200_answer_are_permanent_errors(fixture: str, message: str) -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(fixture=fixture))
    provider = build("runpod", api)

    with pytest.raises(PermanentError, match=message):
        provider.list_instances(NOW)
    assert len(api.requests) == 1


def test_a_graphql_internal_error_is_retried_until_the_answer_is_good() -> None:
    api = FakeApi().add(
        "POST",
        GRAPHQL,
        respond(fixture="runpod/graphql_error_internal.json"),
        respond(fixture="runpod/myself_pods.json"),
    )
    provider = build("runpod", api)

    assert len(provider.list_instances(NOW)) == 5
    assert len(api.requests) == 2


def test_a_graphql_internal_error_that_persists_ends_in_a_transient_error() -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(fixture="runpod/graphql_error_internal.json"))
    provider = build("runpod", api, retry_budget_seconds=5)

    with pytest.raises(TransientError, match="Something went wrong"):
        provider.list_instances(NOW)


@pytest.mark.parametrize(
    ("fixture", "operation"),
    [("runpod/pod_resume_ok.json", "podResume"), ("runpod/pod_bid_resume_ok.json", "podBidResume")],
)
def test_resume_answers_parse_as_mutation_results(fixture: str, operation: str) -> None:
    result = parse.parse_mutation(fixture_json(fixture), operation)

    assert isinstance(result, dict)
    assert result["desiredStatus"] == "RUNNING"


def test_rest_billing_records_pass_through_scrubbing_unchanged() -> None:
    records = fixture_json("runpod/rest_v1_billing_pods.json")

    assert scrub_payload(records) == records


@pytest.mark.parametrize(
    ("fixture", "status", "message"),
    [
        ("runpod/rest_v2_error_404.json", 404, "The requested Pod does not exist."),
        ("runpod/rest_v1_error_not_found.json", 404, "Pod not found"),
    ],
)
def test_rest_error_bodies_give_their_detail_to_the_error(
    fixture: str, status: int, message: str
) -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(status, fixture=fixture))
    provider = build("runpod", api)

    with pytest.raises(NotFoundError, match=message):
        provider.stop("k3f9x2m7q1w8za")


def test_a_rest_v2_rate_limit_waits_exactly_its_retry_after() -> None:
    api = FakeApi().add(
        "POST",
        GRAPHQL,
        respond(429, fixture="runpod/rest_v2_error_429.json", headers={"Retry-After": "3"}),
        respond(fixture="runpod/myself_pods_empty.json"),
    )
    time = FakeTime()
    provider = build("runpod", api, time=time)

    assert provider.list_instances(NOW) == ()
    assert time.sleeps == [3.0]
