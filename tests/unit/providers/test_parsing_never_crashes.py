"""Arbitrary JSON never crashes a parser: it parses, or it raises a typed ProviderError."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog_gpu.errors import ProviderError
from watchdog_gpu.providers.parsing import lambda_cloud, runpod, vast

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)

FIELDS = [
    "id",
    "actual_status",
    "intended_status",
    "is_bid",
    "dph_total",
    "dph_base",
    "storage_total_cost",
    "storage_cost",
    "disk_space",
    "ssh_host",
    "ssh_port",
    "ports",
    "public_ipaddr",
    "start_date",
    "uptime_mins",
    "num_gpus",
    "gpu_name",
    "label",
    "desiredStatus",
    "podType",
    "lastStatusChange",
    "runtime",
    "machine",
    "costPerHr",
    "volumeInGb",
    "containerDiskInGb",
    "gpuCount",
    "name",
    "status",
    "instance_type",
    "ip",
    "tags",
]
rows = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=12)

PARSERS: dict[str, Callable[[object], object]] = {
    "vast.instances": lambda p: vast.parse_instances(p, account="a", now=NOW),
    "vast.page": lambda p: vast.parse_instances_page(p, account="a", now=NOW),
    "vast.account": lambda p: vast.parse_account(p, account="a", now=NOW),
    "vast.volumes": lambda p: vast.parse_volumes(p, account="a", now=NOW),
    "vast.keys": lambda p: vast.parse_ssh_keys(p, account="a"),
    "runpod.pods": lambda p: runpod.parse_pods(p, account="a", now=NOW),
    "runpod.account": lambda p: runpod.parse_account(p, account="a", now=NOW),
    "runpod.volumes": lambda p: runpod.parse_network_volumes(p, account="a", now=NOW),
    "runpod.keys": lambda p: runpod.parse_ssh_keys(p, account="a"),
    "runpod.mutation": lambda p: runpod.parse_mutation(p, "podTerminate"),
    "lambda.instances": lambda p: lambda_cloud.parse_instances(p, account="a", now=NOW),
    "lambda.filesystems": lambda p: lambda_cloud.parse_file_systems(p, account="a", now=NOW),
    "lambda.keys": lambda p: lambda_cloud.parse_ssh_keys(p, account="a"),
    "lambda.terminate": lambda_cloud.parse_terminated_ids,
}


def _parse_or_typed_error(parser: Callable[[object], object], payload: object) -> None:
    with contextlib.suppress(ProviderError):
        parser(payload)


@pytest.mark.parametrize("name", list(PARSERS))
@settings(max_examples=60, deadline=None)
@given(payload=json_values)
def test_any_json_value_parses_or_raises_a_provider_error(name: str, payload: object) -> None:
    _parse_or_typed_error(PARSERS[name], payload)


@settings(max_examples=150, deadline=None)
@given(row=rows)
def test_any_instance_row_in_a_valid_envelope_parses_or_raises_a_provider_error(
    row: dict[str, object],
) -> None:
    envelopes = [
        ("vast.instances", {"instances": [row]}),
        ("runpod.pods", {"data": {"myself": {"pods": [row]}}}),
        ("lambda.instances", {"data": [row]}),
    ]
    for name, payload in envelopes:
        _parse_or_typed_error(PARSERS[name], payload)
