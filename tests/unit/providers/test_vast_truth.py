"""Vast rows as the real API shapes them (rows of tests/fixtures/providers/vast), re-stated in
each documented state: what the parser makes of the state, the bid and the bill
(docs/providers.md, "Vast.ai")."""

from __future__ import annotations

import pytest

from tests.contract.provider_harness import NOW, FakeApi, build, fixture_json, respond
from tests.unit.providers.rows import vast_bid_row
from watchdog_gpu.model import InstanceState, billed_usd_per_hour
from watchdog_gpu.providers.parsing import vast

S = InstanceState


@pytest.mark.parametrize("status", ["loading", "created", None])
def test_a_bid_instance_pulling_its_image_is_starting_and_bills_only_its_disk(
    status: str | None,
) -> None:
    row = vast_bid_row(
        actual_status=status,
        intended_status="running",
        cur_state="running",
        next_state="running",
        status_msg="Pulling image layers 12/40",
    )

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.STARTING
    assert snapshot.interruptible is True
    # "GPU charges begin when status reaches running": only the disk bills while loading.
    assert snapshot.compute_usd_per_hour == 0.0
    assert billed_usd_per_hour(
        snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
    ) == pytest.approx(0.0142222)


def test_a_bid_instance_the_user_wants_running_but_vast_stopped_is_paused() -> None:
    row = vast_bid_row(actual_status="stopped", intended_status="running", next_state="running")

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.PAUSED
    assert snapshot.raw_state == "stopped (intended running, bid < min_bid)"


def test_a_bid_instance_stopped_by_its_user_is_stopped_not_paused() -> None:
    row = vast_bid_row(dph_base=0.40, dph_total=0.4142222, min_bid=0.31)

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.STOPPED
    assert snapshot.raw_state == "stopped"


def test_a_frozen_instance_bills_its_gpu_and_disk() -> None:
    row = vast_bid_row(actual_status="frozen", intended_status="frozen", is_bid=False)

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.RUNNING
    assert snapshot.compute_usd_per_hour == pytest.approx(0.22)
    assert billed_usd_per_hour(
        snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
    ) == pytest.approx(0.2342222)


def test_a_destroyed_instance_still_listed_while_vast_unloads_it_is_gone() -> None:
    # What a DELETE leaves for ≈ 30 s: the row keeps its status, the contract is unloading.
    row = vast_bid_row(
        actual_status="running",
        intended_status="stopped",
        cur_state="running",
        next_state="unloaded",
        is_bid=False,
    )

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.GONE
    assert "unloading" in snapshot.raw_state


def test_an_empty_next_token_ends_paging_like_the_official_client() -> None:
    last_page = fixture_json("vast/instances_v1_page2.json")
    assert isinstance(last_page, dict)
    api = FakeApi().add(
        "GET",
        "/api/v1/instances/",
        respond(fixture="vast/instances_v1_page1.json"),
        respond(200, {**last_page, "next_token": ""}),
    )

    instances = build("vast", api).list_instances(NOW)

    assert len(api.requests) == 2
    assert [instance.instance_id for instance in instances] == ["49877120", "50079779", "50090759"]


def test_a_reserved_instance_bills_the_discounted_rate_vast_charges() -> None:
    # Vast's example: listed 0.80/h, charged 0.50/h (its "as currently charged" pricing).
    row = vast_bid_row(
        actual_status="running",
        intended_status="running",
        is_bid=False,
        dph_base=0.80 - 0.0142222,
        dph_total=0.80,
        instance={
            "gpuCostPerHour": 0.80 - 0.0142222,
            "diskHour": 0.0142222,
            "totalHour": 0.80,
            "discountTotalHour": 0.30,
            "discountedTotalPerHour": 0.50,
        },
    )

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.state is S.RUNNING
    assert snapshot.compute_usd_per_hour == pytest.approx(0.50 - 0.0142222)
    assert billed_usd_per_hour(
        snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
    ) == pytest.approx(0.50)


def test_an_on_demand_instance_whose_charged_rate_is_the_listed_one_bills_the_listed_rate() -> None:
    row = vast_bid_row(actual_status="running", intended_status="running", is_bid=False)
    row["instance"] = {"totalHour": row["dph_total"], "discountedTotalPerHour": row["dph_total"]}

    snapshot = vast.parse_instance(row, account="a", now=NOW)

    assert snapshot.compute_usd_per_hour == pytest.approx(row["dph_total"] - 0.0142222)
