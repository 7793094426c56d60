"""RunPod answers that are partly unreadable: one field of one pod, one account field, a field
the API rejects. The listing is kept and only what could not be read is unknown
(docs/providers.md, "RunPod queries")."""

from __future__ import annotations

import copy
import json
import logging
import re
from typing import Any

import pytest

from watchdog_gpu.errors import PermanentError
from watchdog_gpu.model import InstanceState
from watchdog_gpu.providers.parsing import runpod as parse
from watchdog_gpu.providers.runpod import (
    OPTIONAL_POD_FIELDS,
    PODS_QUERY,
    SDK_PODS_QUERY,
    pods_query,
)

from .provider_harness import NOW, FakeApi, build, fixture_json, respond

GRAPHQL = "/graphql"

# The fields of the official SDK's pods query (runpod 1.12.0, runpod/api/queries/pods.py).
SDK_FIELDS = {
    "id", "containerDiskInGb", "costPerHr", "desiredStatus", "dockerArgs", "dockerId", "env",
    "gpuCount", "imageName", "lastStatusChange", "machineId", "memoryInGb", "name", "podType",
    "port", "ports", "uptimeSeconds", "vcpuCount", "volumeInGb", "volumeMountPath", "runtime",
    "ip", "isIpPublic", "privatePort", "publicPort", "type", "machine", "gpuDisplayName",
}  # fmt: skip


def _pods(*errors: dict[str, Any]) -> dict[str, Any]:
    """The pods fixture (a deep copy), with ``errors`` when given."""
    payload = copy.deepcopy(fixture_json("runpod/myself_pods.json"))
    assert isinstance(payload, dict)
    if errors:
        payload["errors"] = list(errors)
    return payload


def _pod(payload: dict[str, Any], index: int) -> dict[str, Any]:
    pod: dict[str, Any] = payload["data"]["myself"]["pods"][index]
    return pod


def _error(*path: str | int, message: str = "Something went wrong.") -> dict[str, Any]:
    return {"message": message, "path": list(path), "extensions": {"code": "INTERNAL_SERVER_ERROR"}}


def _fields(query: str) -> set[str]:
    return set(re.findall(r"[A-Za-z]+", query)) - {"query", "Pods", "myself", "pods"}


def test_the_pods_query_asks_the_sdks_fields_plus_only_the_documented_optional_ones() -> None:
    extra = _fields(PODS_QUERY) - SDK_FIELDS
    # runtime.gpus is asked for as { id gpuUtilPercent }
    assert extra == {
        "adjustedCostPerHr",
        "networkVolumeId",
        "endpointId",
        "uptimeInSeconds",
        "gpus",
        "gpuUtilPercent",
    }
    assert {field.rsplit(".", 1)[-1] for field in OPTIONAL_POD_FIELDS} == extra - {"gpuUtilPercent"}
    assert _fields(SDK_PODS_QUERY) <= SDK_FIELDS


def test_an_error_in_one_pods_gpu_field_keeps_the_listing_and_leaves_that_field_unknown() -> None:
    payload = _pods(_error("myself", "pods", 1, "runtime", "gpus"))
    _pod(payload, 1)["runtime"]["gpus"] = None

    pods = {pod.instance_id: pod for pod in parse.parse_pods(payload, account="a", now=NOW)}

    assert len(pods) == 5
    hit = pods["q7w2e9r4t6y1ui"]
    assert hit.unreadable == ("runtime.gpus",)
    assert hit.provider_gpu_util_percent is None  # unknown, not idle
    assert hit.state is InstanceState.RUNNING
    assert pods["k3f9x2m7q1w8za"].unreadable == ()
    assert pods["k3f9x2m7q1w8za"].provider_gpu_util_percent is not None


def test_an_unreadable_runtime_is_not_a_container_that_is_down() -> None:
    payload = _pods(_error("myself", "pods", 0, "runtime"))
    _pod(payload, 0)["runtime"] = None

    busy = parse.parse_pods(payload, account="a", now=NOW)[0]

    assert busy.state is InstanceState.RUNNING  # not "starting": the runtime is unknown
    assert (busy.ssh_host, busy.provider_gpu_util_percent) == (None, None)
    assert busy.unreadable == ("runtime",)


def test_an_unreadable_savings_plan_rate_falls_back_to_the_rental_rate() -> None:
    payload = _pods(_error("myself", "pods", 0, "adjustedCostPerHr"))
    _pod(payload, 0)["adjustedCostPerHr"] = None
    _pod(payload, 1)["adjustedCostPerHr"] = 2.46

    first, second, *_ = parse.parse_pods(payload, account="a", now=NOW)

    assert first.compute_usd_per_hour == pytest.approx(0.69)
    assert first.unreadable == ("adjustedCostPerHr",)
    assert second.compute_usd_per_hour == pytest.approx(2.46)  # the plan's rate, not 3.28


@pytest.mark.parametrize(
    "path",
    [
        ("myself", "pods"),  # the list itself
        ("myself", "pods", 2),  # a whole pod
        ("myself", "pods", 2, "id"),  # a pod without its id would look terminated
        ("myself",),
        (),  # no path at all
    ],
)
def test_an_error_beyond_one_pods_field_still_fails_the_listing(path: tuple[Any, ...]) -> None:
    payload = _pods({"message": "Something is wrong", "path": list(path)})

    with pytest.raises(PermanentError):
        parse.parse_pods(payload, account="a", now=NOW)


def test_an_unreadable_field_is_logged_once_per_account_not_every_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    payload = _pods(_error("myself", "pods", 1, "runtime", "gpus"))
    _pod(payload, 1)["runtime"]["gpus"] = None
    api = FakeApi().add("POST", GRAPHQL, respond(200, payload), respond(200, payload))
    provider = build("runpod", api)

    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.providers.runpod"):
        provider.list_instances(NOW)
        provider.list_instances(NOW)

    lines = [r.getMessage() for r in caplog.records if "field=runtime.gpus" in r.getMessage()]
    assert len(lines) == 1
    assert "treated as unknown" in lines[0]


# The Pod fields an official source shows: the SDK's query (runpod 1.12.0) and RunPod's GraphQL
# guide (sdks/graphql/manage-pods.mdx: adjustedCostPerHr, runtime.uptimeInSeconds,
# runtime.gpus { id gpuUtilPercent }). networkVolumeId and endpointId are in no official source.
DOCUMENTED_FIELDS = SDK_FIELDS | {"adjustedCostPerHr", "uptimeInSeconds", "gpus", "gpuUtilPercent"}
_TYPES = {"gpus": "PodRuntime", "gpuUtilPercent": "PodRuntimeGpus", "uptimeInSeconds": "PodRuntime"}


def _schema_of_the_official_sources(status: int) -> Any:
    """A GraphQL endpoint that knows only :data:`DOCUMENTED_FIELDS` and refuses any other field
    the way graphql-js does (one error per unknown field, no ``data``), with HTTP ``status``."""

    def answer(request: Any) -> Any:
        unknown = sorted(_fields(json.loads(request.content)["query"]) - DOCUMENTED_FIELDS)
        if not unknown:
            return respond(fixture="runpod/myself_pods.json")
        errors = [
            {
                "message": f'Cannot query field "{name}" on type "{_TYPES.get(name, "Pod")}".',
                "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
            }
            for name in unknown
        ]
        return respond(status, {"errors": errors})

    return answer


@pytest.mark.parametrize("status", [400, 200])
def test_a_rejected_optional_field_loses_only_that_field(status: int) -> None:
    api = FakeApi().add("POST", GRAPHQL, _schema_of_the_official_sources(status))
    provider = build("runpod", api)

    first = {pod.instance_id: pod for pod in provider.list_instances(NOW)}
    provider.list_instances(NOW)

    kept = ("adjustedCostPerHr", "runtime.uptimeInSeconds", "runtime.gpus")
    queries = [json.loads(request.content)["query"] for request in api.requests]
    # One refusal, then the query without the two undocumented fields, kept from then on.
    assert queries == [PODS_QUERY, pods_query(kept), pods_query(kept)]
    busy = first["k3f9x2m7q1w8za"]
    assert busy.unreadable == ("endpointId", "networkVolumeId")
    # What the documented fields give is still read: utilisation, uptime, the plan's rate.
    assert busy.provider_gpu_util_percent is not None
    assert busy.started_at is not None
    assert busy.compute_usd_per_hour == pytest.approx(0.69)


def test_an_http_200_validation_error_does_not_blind_the_account() -> None:
    refused = {
        "errors": [
            {
                "message": 'Cannot query field "networkVolumeId" on type "Pod".',
                "locations": [{"line": 5, "column": 45}],
                "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
            }
        ]
    }
    account = fixture_json("runpod/myself_account.json")
    api = (
        FakeApi()
        .add("POST", GRAPHQL, respond(200, refused), body_contains="networkVolumeId")
        .add("POST", GRAPHQL, respond(fixture="runpod/myself_pods.json"), body_contains="pods {")
        .add("POST", GRAPHQL, respond(200, account), body_contains="clientBalance")
    )
    provider = build("runpod", api)

    observations = [provider.observe(NOW), provider.observe(NOW)]

    for observation in observations:
        assert len(observation.instances) == 5
        assert observation.problems == {}
        (volume,) = observation.volumes
        assert volume.attached is None  # which pod mounts it is what was lost
    # Refused once; every later poll asks without the field.
    assert sum("networkVolumeId" in request.content.decode() for request in api.requests) == 1


def test_a_refusal_that_names_no_field_is_narrowed_down_one_field_at_a_time() -> None:
    def answer(request: Any) -> Any:
        if "uptimeInSeconds" in json.loads(request.content)["query"]:
            return respond(
                400,
                {
                    "errors": [
                        {
                            "message": "Validation error of type FieldUndefined",
                            "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
                        }
                    ]
                },
            )
        return respond(fixture="runpod/myself_pods.json")

    provider = build("runpod", FakeApi().add("POST", GRAPHQL, answer))

    pods = provider.list_instances(NOW)

    assert {pod.unreadable for pod in pods} == {("runtime.uptimeInSeconds",)}
    assert pods[0].provider_gpu_util_percent is not None


def test_refused_fields_named_one_answer_at_a_time_are_each_dropped_alone() -> None:
    # A cut-short 400 excerpt names one refused field per answer: each is dropped in turn.
    def answer(request: Any) -> Any:
        query = json.loads(request.content)["query"]
        for name in ("networkVolumeId", "endpointId"):
            if name in query:
                message = f'Cannot query field "{name}" on type "Pod".'
                return respond(400, {"errors": [{"message": message}]})
        return respond(fixture="runpod/myself_pods.json")

    api = FakeApi().add("POST", GRAPHQL, answer)
    provider = build("runpod", api)

    pods = provider.list_instances(NOW)

    kept = ("adjustedCostPerHr", "runtime.uptimeInSeconds", "runtime.gpus")
    assert json.loads(api.requests[-1].content)["query"] == pods_query(kept)
    assert len(api.requests) == 3
    assert {pod.unreadable for pod in pods} == {("endpointId", "networkVolumeId")}


def test_a_bad_request_that_is_not_a_refused_document_fails_the_listing_at_once() -> None:
    api = FakeApi().add("POST", GRAPHQL, respond(400, {"errors": [{"message": "Bad Request"}]}))

    with pytest.raises(PermanentError):
        build("runpod", api).list_instances(NOW)

    assert len(api.requests) == 1


def test_serverless_workers_are_not_listed_but_their_network_volume_is_in_use() -> None:
    pods = _pods()
    for pod in pods["data"]["myself"]["pods"]:
        pod["networkVolumeId"] = None
        pod["endpointId"] = None
    worker = _pod(pods, 0)
    worker["endpointId"] = "vllm-endpoint-7x2"
    worker["networkVolumeId"] = "agv6w2qcg7"
    account = fixture_json("runpod/myself_account.json")
    provider = build("runpod", _account_api(pods, account))

    observation = provider.observe(NOW)
    listed = provider.list_instances(NOW)

    assert "k3f9x2m7q1w8za" not in {pod.instance_id for pod in observation.instances}
    assert "k3f9x2m7q1w8za" not in {pod.instance_id for pod in listed}
    assert len(observation.instances) == len(listed) == 4
    (volume,) = observation.volumes
    assert volume.attached is True


def _account_api(pods: object, account: object) -> FakeApi:
    return (
        FakeApi()
        .add("POST", GRAPHQL, respond(200, pods), body_contains="pods {")
        .add("POST", GRAPHQL, respond(200, account), body_contains="clientBalance")
    )


def test_an_unreadable_balance_leaves_volumes_and_keys_readable() -> None:
    account = copy.deepcopy(fixture_json("runpod/myself_account.json"))
    assert isinstance(account, dict)
    account["data"]["myself"]["clientBalance"] = None
    account["errors"] = [_error("myself", "clientBalance")]

    observation = build("runpod", _account_api(_pods(), account)).observe(NOW)

    assert observation.problems == {}
    assert observation.account.balance_usd is None
    assert observation.account.spend_limit_usd_per_hour == 80
    assert [volume.volume_id for volume in observation.volumes] == ["agv6w2qcg7"]
    assert len(observation.ssh_keys) == 2


@pytest.mark.parametrize(
    ("mounted_by", "expected"),
    [
        ("k3f9x2m7q1w8za", True),  # a running pod uses it
        ("z1x2c3v4b5n6m7", True),  # so does one starting (RUNNING, runtime not up yet)
        ("a8s7d6f5g4h3jk", False),  # a stopped pod does not: the volume bills on its own
        (None, False),  # every pod read, none names it
    ],
)
def test_network_volume_attachment_is_read_from_the_pods(
    mounted_by: str | None, expected: bool
) -> None:
    pods = _pods()
    for pod in pods["data"]["myself"]["pods"]:
        pod["networkVolumeId"] = "agv6w2qcg7" if pod["id"] == mounted_by else None
    account = fixture_json("runpod/myself_account.json")

    (volume,) = build("runpod", _account_api(pods, account)).observe(NOW).volumes

    assert volume.attached is expected


def test_network_volume_attachment_is_unknown_when_the_pods_field_is_missing() -> None:
    account = fixture_json("runpod/myself_account.json")

    (volume,) = build("runpod", _account_api(_pods(), account)).observe(NOW).volumes

    assert volume.attached is None  # the fixture's pods carry no networkVolumeId
