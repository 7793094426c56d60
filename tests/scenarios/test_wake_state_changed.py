"""Scenario: wakes for time limits on listed state, and never on a stale listing
(wake_state_changed.toml).

A ``max_runtime`` TTL's warning point and due time fall between two ticks. The evaluation
reports them (``RuleOutcome.next_listed``, ``Plan.next_listed_due``), and the watchdog wakes at
them — listing the accounts first, since a wake may act on listed state only from a listing at
or after the due time (``docs/safety.md``): an instance restarted after the tick's listing is
seen restarted, not killed by its old run's TTL; without the restart the TTL is decided at its
limit instead of a tick or two later. Likewise a ``paused_interruptible`` instance resumed after
the tick's listing is not destroyed at its due time. The idle limit of another instance is
still decided at a wake on its streamed rows.
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
from watchdog_gpu.wake import MIN_SPACING

NAME = "wake_state_changed"
CONFIG = (
    f'{ENFORCE}[rules.max_runtime]\nlimit = "1h30s"\nwarn_before = "10m10s"\n'
    '[safety]\nprotect_accounts = ["vast-keep"]\n'
    # Declared so that protect_accounts names a configured account; the scenario's accounts
    # replace the file's in simulate.
    '[[accounts]]\nname = "vast-keep"\nprovider = "vast"\napi_key = "sim"\n'
)
RESTARTED, FORGOTTEN, PROTECTED = "vast-main/9301", "vast-main/9302", "vast-keep/9303"
IDLE_WAKE = offset("1h1m30s")  # 9302's idle limit (31m23s + 30m) + the rows' lag (7 s)
LIMIT, WARN_BEFORE = offset("1h30s"), offset("10m10s")
TICK = 60


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_the_idle_limit_is_still_decided_at_a_wake_on_its_rows(run: Run) -> None:
    (action,) = run.actions_for(FORGOTTEN)
    assert (action["rule"], action["result"]) == ("idle_gpu", "verified")
    assert action["offset_s"] == IDLE_WAKE


def test_an_instance_restarted_after_the_last_tick_is_not_killed_by_its_old_ttl(run: Run) -> None:
    # The 1h tick listed the old run; the wake at its due time (1h0m32s) listed first and saw
    # the new one (started at 1h0m15s): the episode is resolved, nothing is destroyed.
    assert run.actions_for(RESTARTED) == []
    assert run.instances[RESTARTED]["final_state"] == "running"
    (resolved,) = [n for n in run.notifications_for(RESTARTED) if n["severity"] == "info"]
    assert offset("1h0m15s") < resolved["offset_s"] < offset("1h1m")  # before the next tick


def test_a_ttl_in_a_protected_account_is_never_acted_on_at_a_wake_or_a_tick(run: Run) -> None:
    assert run.actions_for(PROTECTED) == []
    assert run.instances[PROTECTED]["final_state"] == "running"
    assert not [c for c in run.api_calls if c[1] == "vast-keep"]


def test_without_the_restart_the_ttl_is_decided_at_its_limit_not_a_tick_later(
    tmp_path: Path,
) -> None:
    data: dict[str, Any] = deepcopy(scenario_data(NAME))
    restarted = data["accounts"][0]["instances"][0]
    restarted["events"] = restarted["events"][:1]  # never restarted
    run = run_scenario(data, tmp_path, CONFIG)
    (action,) = run.actions_for(RESTARTED)
    assert (action["rule"], action["result"]) == ("max_runtime", "verified")
    (warning,) = [
        n["offset_s"]
        for n in run.notifications_for(RESTARTED)
        if n["severity"] == "warning" and "will be destroyed" in n["title"]
    ]
    spacing = round(MIN_SPACING.total_seconds())
    # Warned at its warning point (a wake, not the next tick), destroyed warn_before later:
    # within a wake's spacing of the limit, never before it, and before the next tick.
    assert LIMIT - WARN_BEFORE <= warning <= LIMIT - WARN_BEFORE + spacing
    assert action["offset_s"] - warning == WARN_BEFORE
    assert LIMIT <= action["offset_s"] <= LIMIT + spacing
    assert action["offset_s"] < LIMIT + TICK - LIMIT % TICK


def test_the_watchdog_never_costs_money(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def outbid(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The scenario with one interruptible instance instead of its own (``events`` scripted)."""
    data: dict[str, Any] = deepcopy(scenario_data(NAME))
    (account, *_) = data["accounts"]
    account["instances"] = [
        {
            "id": "9304",
            "name": "outbid",
            "interruptible": True,
            "compute_usd_per_hour": 0.9,
            "disk_gb": 200,
            "storage_usd_per_gb_month": 0.2,
            "events": events,
        }
    ]
    data["accounts"] = [account]
    return data


PAUSED_CONFIG = f'{ENFORCE}[rules.paused_interruptible]\nafter = "30m30s"\nwarn_before = "10m"\n'


@pytest.mark.parametrize("resumed", [False, True])
def test_a_paused_instance_resumed_after_the_last_tick_is_not_destroyed_at_its_due_time(
    tmp_path: Path, resumed: bool
) -> None:
    # Outbid at 20m (listed paused at that tick): due 30m30s later, at 50m30s — between two
    # ticks. Resumed at 50m25s, after the 50m listing: the wake at the due time lists first and
    # sees it running. Not resumed: destroyed at that wake, on time.
    events: list[dict[str, Any]] = [
        {"at": "0s", "state": "running", "gpu_util": 90},
        {"at": "20m", "state": "paused"},
    ]
    if resumed:
        events.append({"at": "50m25s", "state": "running", "gpu_util": 90})
    run = run_scenario(outbid(events), tmp_path, PAUSED_CONFIG)
    actions = run.actions_for("vast-main/9304")
    if resumed:
        assert actions == []
        assert run.instances["vast-main/9304"]["final_state"] == "running"
        return
    (action,) = actions
    assert (action["rule"], action["result"]) == ("paused_interruptible", "verified")
    assert action["offset_s"] == offset("50m30s")
