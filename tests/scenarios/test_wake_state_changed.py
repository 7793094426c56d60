"""Scenario: a wake must not act on a listing older than the action's due time
(wake_state_changed.toml).

A wake between two ticks (wake.py) takes the streamed rows but polls no provider: the instance
states it reads are the previous tick's listing. ``max_runtime`` judges by listed state
(running since), so its action waits for a listing at or after its due time — the next tick —
while the idle limit that woke the watchdog is decided at the wake, on its rows.
"""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    offset,
    run_scenario,
    scenario_data,
)

NAME = "wake_state_changed"
CONFIG = (
    f'{ENFORCE}[rules.max_runtime]\nlimit = "1h30s"\nwarn_before = "10m10s"\n'
    '[safety]\nprotect_accounts = ["vast-keep"]\n'
    # Declared so that protect_accounts names a configured account; the scenario's accounts
    # replace the file's in simulate.
    '[[accounts]]\nname = "vast-keep"\nprovider = "vast"\napi_key = "sim"\n'
)
RESTARTED, FORGOTTEN, PROTECTED = "vast-main/9301", "vast-main/9302", "vast-keep/9303"
WAKE = offset("1h1m30s")  # 9302's idle limit (31m23s + 30m) + the rows' lag (7 s)
TTL_DUE = offset("1h1m10s")  # warned at the 51m tick + warn_before 10m10s (after 1h30s)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_the_idle_limit_is_decided_at_a_wake_after_the_ttls_fell_due(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    assert (action["rule"], action["result"]) == ("idle_gpu", "verified")
    assert action["offset_s"] == WAKE
    assert TTL_DUE < WAKE < TTL_DUE + 60 - TTL_DUE % 60  # between the same two ticks


def test_an_instance_restarted_after_the_last_listing_is_not_killed_by_the_wake(run: Run) -> None:
    # The wake read "running since 0" from the 1h1m listing; the 1h2m listing shows the new run
    # (started at 1h1m8s): its TTL has hardly begun, the episode is resolved.
    assert run.actions_for(RESTARTED) == []
    assert run.instances[RESTARTED]["final_state"] == "running"
    resolved = [n for n in run.notifications_for(RESTARTED) if n["severity"] == "info"]
    assert [n["offset_s"] for n in resolved] == [offset("1h2m")]


def test_a_ttl_in_a_protected_account_is_never_acted_on_at_a_wake_or_a_tick(run: Run) -> None:
    assert run.actions_for(PROTECTED) == []
    assert run.instances[PROTECTED]["final_state"] == "running"
    assert not [c for c in run.api_calls if c[1] == "vast-keep"]


def test_without_the_restart_the_ttl_goes_at_the_next_tick_with_its_fresh_listing(
    tmp_path: Path,
) -> None:
    data: dict[str, Any] = deepcopy(scenario_data(NAME))
    restarted = data["accounts"][0]["instances"][0]
    restarted["events"] = restarted["events"][:1]  # never restarted
    (action,) = run_scenario(data, tmp_path, CONFIG).actions_for(RESTARTED)
    assert (action["rule"], action["result"]) == ("max_runtime", "verified")
    assert action["offset_s"] == offset("1h2m")  # not the wake at 1h1m30s: listed at 1h1m


def test_the_watchdog_never_costs_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)
