"""Scenario: a kill that cannot be confirmed is escalated by time (unverified_outage.toml).

The RunPod destroy is called at 40m (40m07s: once the rows covering it are in); half a minute
later the API answers HTTP 500 for 90 minutes, so re-listing cannot confirm the kill. Escalation
depends on the time since the call, not on the instance still being listed: the first critical
message comes about ``escalate_unverified_after`` (10 min here) after the call, further ones as
the time doubles (bounded: a handful over 90 minutes, not one per check), and the action is
verified — never marked done by a timer — once the API answers again.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import ENFORCE, Run, offset, run_scenario

NAME = "unverified_outage"
CONFIG = f'{ENFORCE}\n[safety]\nescalate_unverified_after = "10m"\n'
POD = "runpod-main/a1b2c3d4e5f6gh"
# Decided once the streamed rows covering 40m are in (the wake at batch_seconds + 2 s): the
# pod's idle time is proven by dmon rows only, not by RunPod's reading at the 40m poll.
CALLED_AT = offset("40m7s")
ESCALATE_AFTER = offset("10m")
OUTAGE_ENDS = offset("2h10m30s")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def escalations(run: Run) -> list[dict[str, object]]:
    return [
        note
        for note in run.notifications_for(POD)
        if note["severity"] == "critical" and note["rule"] == "idle_gpu"
    ]


def test_the_destroy_is_called_once_when_due(run: Run) -> None:
    assert [(call[0], call[3]) for call in run.api_calls] == [(CALLED_AT, "destroy")]


def test_the_first_escalation_comes_about_escalate_after_the_call_during_the_outage(
    run: Run,
) -> None:
    first = escalations(run)[0]
    assert isinstance(first["offset_s"], int)
    # One tick plus the provider client's own retries of the failing listing at most.
    assert CALLED_AT + ESCALATE_AFTER <= first["offset_s"] <= CALLED_AT + ESCALATE_AFTER + 180
    assert "still billing" in str(first["title"])


def test_escalations_repeat_while_it_lasts_but_stay_few(run: Run) -> None:
    during = [note for note in escalations(run) if int(str(note["offset_s"])) < OUTAGE_ENDS]
    assert 3 <= len(during) <= 5  # at 10, 20, 40, 80 minutes after the call


def test_the_kill_is_verified_only_once_the_api_answers_again(run: Run) -> None:
    (action,) = run.actions
    assert action["result"] == "verified"
    assert action["verified_offset_s"] > OUTAGE_ENDS
    verified = [n for n in run.notifications_for(POD) if str(n["title"]).startswith("Destroyed")]
    assert [n["severity"] for n in verified] == ["warning"]
