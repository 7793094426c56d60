"""Scenario: a balance exactly at the budget's floor (balance_at_floor.toml).

``[rules.budget] min_balance_usd = 10``; the balance is set to $10.00 at 1h. A balance equal to
the floor has reached it ("at or under"): the destroy comes at the first tick that lists
$10.00 — before this fix the strict comparison acted a tick late.
"""

from __future__ import annotations

from pathlib import Path

from tests.scenarios.helpers import ENFORCE, offset, run_scenario, scenario_data

NAME = "balance_at_floor"
CONFIG = f"{ENFORCE}\n[rules.budget]\nmin_balance_usd = 10.0\n"
AT_FLOOR = offset("1h")


def test_a_balance_equal_to_the_floor_acts_at_the_tick_that_sees_it(tmp_path: Path) -> None:
    run = run_scenario(NAME, tmp_path, CONFIG)
    (action,) = run.actions_for("runpod-main/9601")
    assert (action["rule"], action["action"], action["result"]) == ("budget", "destroy", "verified")
    assert action["offset_s"] == AT_FLOOR
    assert run.instances["runpod-main/9601"]["final_state"] == "gone"


def test_a_vast_balance_at_the_floor_only_alerts(tmp_path: Path) -> None:
    # Vast does not document which balance field a team key's account shows: a floor on it
    # must not destroy the account's instances, it alerts critically (docs/providers.md).
    data = scenario_data(NAME)
    data["accounts"][0].update(name="vast-main", provider="vast")
    run = run_scenario(data, tmp_path, CONFIG)
    assert run.actions == []
    assert run.instances["vast-main/9601"]["final_state"] == "running"
    (floor,) = [n for n in run.notifications_for("vast-main/9601") if n["rule"] == "budget"]
    assert (floor["severity"], floor["offset_s"]) == ("critical", AT_FLOOR)
    (sent,) = [note for _at, note in run.sent if note.rule == "budget"]
    assert "alert only" in sent.body


def test_a_balance_above_the_floor_is_left_alone(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    data["accounts"][0]["events"][0]["balance_usd"] = 10.5  # above $10 for 15 minutes
    data["duration"] = "1h10m"
    run = run_scenario(data, tmp_path, CONFIG)
    assert run.actions == []


def test_float_dust_above_the_floor_is_the_floor(tmp_path: Path) -> None:
    # $10 read through float arithmetic (10.000000000000002) is $10.00: money is compared in
    # cents, so the destroy still comes at the tick that lists it, not at the next one.
    data = scenario_data(NAME)
    data["accounts"][0]["events"] = [{"at": "1h", "balance_usd": 10.000000000000002}]
    run = run_scenario(data, tmp_path, CONFIG)
    (action,) = run.actions_for("runpod-main/9601")
    assert (action["rule"], action["offset_s"]) == ("budget", AT_FLOOR)


def test_a_low_balance_floor_is_reached_in_cents_too(tmp_path: Path) -> None:
    data = scenario_data(NAME)
    data["accounts"][0]["events"] = [{"at": "1h", "balance_usd": 10.000000000000002}]
    # A short min_runway: only the floor can raise the alert (5 h of runway at $2/h is plenty).
    config = f'{ENFORCE}\n[rules.low_balance]\nmin_balance_usd = 10.0\nmin_runway = "1h"\n'
    run = run_scenario(data, tmp_path, config)
    floor = [n for n in run.notifications if n["rule"] == "low_balance"]
    assert floor, run.notifications
    assert floor[0]["offset_s"] == AT_FLOOR
    (sent,) = [note for _at, note in run.sent if note.rule == "low_balance"]
    assert "balance $10.00 is at or under $10.00" in sent.body
