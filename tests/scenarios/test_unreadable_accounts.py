"""Scenario: what cannot be read reaches the phone (unreadable_accounts.toml).

With every rule at its documented defaults: an instance listed in a state no state table maps
is told after ``unobserved.after`` (30 min); a revoked key is critical at once; a listing that
cannot be read (truncated JSON) is a warning after ``outage_after`` (10 min). Each is told once,
and nothing is stopped or destroyed on what cannot be read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import Run, offset, run_scenario, scenario_data, tick_seconds

NAME = "unreadable_accounts"
TICK = tick_seconds(NAME)
EXPLODED_AT = offset("1h")
REVOKED_AT = offset("30m")
MALFORMED_AT = offset("40m")
UNOBSERVED_AFTER = offset("30m")
OUTAGE_AFTER = offset("10m")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def notes_of(run: Run, account: str, rule: str) -> list[dict[str, object]]:
    return [n for n in run.notifications if n["account"] == account and n["rule"] == rule]


def test_an_unmapped_state_is_told_once_after_the_blind_window(run: Run) -> None:
    (note,) = notes_of(run, "vast-main", "unobserved")
    assert (note["severity"], note["instance"]) == ("warning", "9401")
    due = EXPLODED_AT + UNOBSERVED_AFTER
    assert isinstance(note["offset_s"], int)
    assert due <= note["offset_s"] <= due + 2 * TICK
    assert "exploded" in str(note["title"])


def test_a_revoked_key_is_critical_at_once(run: Run) -> None:
    (note,) = notes_of(run, "runpod-main", "account_health")
    assert (note["severity"], note["instance"]) == ("critical", None)
    assert isinstance(note["offset_s"], int)
    assert REVOKED_AT <= note["offset_s"] <= REVOKED_AT + TICK
    (body,) = [n.body for _at, n in run.sent if n.account == "runpod-main"]
    assert "rejects the API key" in body
    assert "1 instance(s) at $1.20/h" in body


def test_a_listing_that_cannot_be_read_is_a_warning_after_outage_after(run: Run) -> None:
    (note,) = notes_of(run, "vast-proxy", "account_health")
    assert (note["severity"], note["instance"]) == ("warning", None)
    assert isinstance(note["offset_s"], int)
    # Unreadable since the last listing that worked, one tick before the fault began.
    due = MALFORMED_AT + OUTAGE_AFTER
    assert due - TICK <= note["offset_s"] <= due
    assert "1 instance(s) at $0.50/h" in str(note["title"])


def test_nothing_is_acted_on_from_what_cannot_be_read(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    assert len(run.notifications) == 3


def test_an_unmapped_runpod_state_is_told_the_same_way(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    exploding = data["accounts"][0]
    exploding["provider"] = "runpod"
    exploding["instances"][0]["id"] = "x1y2z3w4v5u6ts"
    data["accounts"] = [exploding]
    run = run_scenario(data, tmp_path)
    (note,) = run.notifications
    assert (note["rule"], note["severity"], note["instance"]) == (
        "unobserved",
        "warning",
        "x1y2z3w4v5u6ts",
    )
    due = EXPLODED_AT + UNOBSERVED_AFTER
    assert due <= note["offset_s"] <= due + 2 * TICK
