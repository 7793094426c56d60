"""Scenario: a destroy ends the bill at the call (destroy_bill_ends_at_call.toml).

The providers stop billing an instance when they accept its destroy; the row lingers a few
seconds in a state that bills nothing. ``report`` reads the ledger, which ends the bill at the
instant the call was accepted (recorded on the action) once a listing confirmed it, so each
instance's figure equals what the simulated provider billed, to the cent, even with a verify
interval (3 min) far longer than the provider's delay.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from tests.scenarios.helpers import ENFORCE, finish, load, simulating
from watchdog_gpu.cli import EXIT_OK, main

NAME = "destroy_bill_ends_at_call"
CONFIG = f'{ENFORCE}\n[safety]\nverify_interval = "3m"\n'
VERIFY_SECONDS = 180


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp(NAME)
    with simulating(NAME, tmp_path, CONFIG) as sim:
        run = finish(sim)
        database = sim.store.engine.url.render_as_string(hide_password=False)
        end = sim.clock.now()
    window = ["--since", load(NAME).start.isoformat(), "--until", end.isoformat()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", "--db", database, *window, "--by", "instance", "--json"])
    assert code == EXIT_OK
    return {"run": run.json, "report": json.loads(out.getvalue())}


def test_both_instances_are_destroyed_and_verified_a_verify_interval_after_the_call(
    outcome: dict[str, Any],
) -> None:
    actions = outcome["run"]["actions"]
    assert sorted(a["account"] for a in actions) == ["lambda-big", "vast-big"]
    for action in actions:
        assert (action["action"], action["result"]) == ("destroy", "verified")
        # Verified long after the provider stopped listing it (30 s on Vast, 60 s on Lambda).
        assert action["verified_offset_s"] - action["offset_s"] >= VERIFY_SECONDS


def test_report_per_instance_equals_what_the_provider_billed_to_the_cent(
    outcome: dict[str, Any],
) -> None:
    rows = {f"{r['account']}/{r['id']}": r for r in outcome["report"]["rows"]}
    instances = outcome["run"]["instances"]
    assert set(rows) == set(instances)
    for key, figures in instances.items():
        assert figures["final_state"] == "gone", key
        assert round(rows[key]["usd"], 2) == figures["spend_usd"], key
    assert round(outcome["report"]["total"]["usd"], 2) == outcome["run"]["totals"]["spend_usd"]


def test_the_activity_split_adds_up_to_each_instances_spend(outcome: dict[str, Any]) -> None:
    for row in outcome["report"]["rows"]:
        parts = row["idle_usd"] + row["blind_usd"] + row["busy_usd"] + row["no_gpu_usd"]
        assert parts == pytest.approx(row["usd"], abs=3e-4), row["id"]  # rows hold 4 decimals
