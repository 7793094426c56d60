"""Scenario: a 3-hour TTL on a host whose heartbeat is late every five minutes
(ttl_with_blips.toml).

The job keeps its GPU busy, so only max_runtime can end it. Every blip (one poll listed
``unknown``, the container's start unchanged) is inside the same run and bills: the TTL counts
the run's billed time and destroys at 3 h, not 3 h after the latest blip (never, here).
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_within_tick,
    offset,
    run_scenario,
    tick_seconds,
)

NAME = "ttl_with_blips"
INSTANCE = "vast-main/9001"
LIMIT = offset("3h")
WARN_BEFORE = offset("1h")  # max_runtime's default
CONFIG = ENFORCE + '[rules.max_runtime]\nlimit = "3h"\n'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_the_ttl_fires_at_three_hours_of_billed_time_despite_the_blips(run: Run) -> None:
    (action,) = run.actions_for(INSTANCE)
    assert (action["rule"], action["action"], action["result"]) == (
        "max_runtime",
        "destroy",
        "verified",
    )
    assert_within_tick(action["offset_s"], LIMIT, tick_seconds(NAME))


def test_one_warning_goes_out_an_hour_ahead(run: Run) -> None:
    notes = run.notifications_for(INSTANCE)
    warnings = [n for n in notes if n["severity"] == "warning" and "will be" in n["title"]]
    assert len(warnings) == 1, notes
    assert_within_tick(warnings[0]["offset_s"], LIMIT - WARN_BEFORE, tick_seconds(NAME))
