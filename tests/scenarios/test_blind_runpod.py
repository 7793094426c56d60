"""Scenario: RunPod pods seen only through RunPod's utilisation figure (blind_runpod.toml).

Evidence has a strength (docs/safety.md, "Evidence strength"): the SSH probe's dmon rows prove a
GPU idle or busy; RunPod's figure, one reading per poll, proves busy, never idle. A pod whose
account has no SSH key, or whose SSH is down, is never destroyed as idle on that figure alone —
a job busy 2 s every 9 min reads 0 % at every poll. A pod that looks idle gets an alert with the
protect/snooze/opt-in commands instead; with ``idle_evidence = "provider_api"`` on the account
the figure decides, and then both the idle pod and the bursty one are destroyed (what the opt-in
can misjudge, as documented).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.helpers import (
    ENFORCE,
    Run,
    assert_spend_never_above_baseline,
    finish,
    run_scenario,
    simulating,
)
from watchdog_gpu.model import Severity

NAME = "blind_runpod"
BURSTY = "runpod-blind/burstpod0001"
IDLE = "runpod-blind/idlepod00001"
SSH_DOWN = "runpod-keyed/sshdownpod01"
# The account is listed without an SSH key: the watchdog cannot log in to its pods.
NO_KEY = '[[accounts]]\nname = "runpod-blind"\nprovider = "runpod"\napi_key = "unused"\n'
CONFIG = f"{ENFORCE}\n{NO_KEY}"
OPTED_IN = f'{CONFIG}idle_evidence = "provider_api"\n'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME), CONFIG)


def test_no_pod_is_destroyed_on_the_providers_reading_alone(run: Run) -> None:
    assert run.actions == []
    assert run.api_calls == ()
    for pod in (BURSTY, IDLE, SSH_DOWN):
        assert run.instances[pod]["final_state"] == "running", pod


def test_the_pods_that_look_idle_are_alerted_not_warned_of_a_destroy(run: Run) -> None:
    for pod in (BURSTY, IDLE, SSH_DOWN):
        idle = [note for note in run.notifications_for(pod) if note["rule"] == "idle_gpu"]
        assert len(idle) == 1, (pod, idle)
        assert "looks idle per the provider" in idle[0]["title"]
        assert "not destroyed" in idle[0]["title"]
        assert "destroy" not in idle[0]["title"].replace("not destroyed", "")


def test_the_alert_names_the_commands_to_keep_it_and_the_opt_in(tmp_path: Path) -> None:
    with simulating(NAME, tmp_path, CONFIG) as sim:
        sim.run()
        notes = [
            note
            for _at, note in sim.capture.sent
            if note.rule == "idle_gpu" and note.instance_id == "idlepod00001"
        ]
    (note,) = notes
    assert note.severity is Severity.WARNING
    assert "watchdog-gpu protect runpod-blind/idlepod00001" in note.body
    assert "watchdog-gpu snooze runpod-blind/idlepod00001" in note.body
    assert 'idle_evidence = "provider_api"' in note.body


def test_the_blind_pods_are_reported_unobserved(run: Run) -> None:
    # The reading at 0 % is no usable evidence: the blind-time alert says so (before the fix
    # it counted as observation, and a pod with SSH down for hours was never reported).
    for pod in (BURSTY, IDLE, SSH_DOWN):
        assert [n["rule"] for n in run.notifications_for(pod) if n["rule"] == "unobserved"] == [
            "unobserved"
        ], pod


def test_the_watchdog_never_costs_more_than_none(run: Run) -> None:
    assert_spend_never_above_baseline(run)


def test_with_the_opt_in_the_figure_decides_and_misjudges_the_bursty_pod(tmp_path: Path) -> None:
    run = run_scenario(NAME, tmp_path, OPTED_IN)
    destroyed = {f"{a['account']}/{a['instance']}": a for a in run.actions}
    # The idle pod goes, as the user opted in for; so does the bursty one: its job works 2 s
    # every 9 min between the polls, and the figure reads 0 % at every poll.
    assert set(destroyed) == {BURSTY, IDLE}
    for action in destroyed.values():
        assert (action["rule"], action["action"], action["result"]) == (
            "idle_gpu",
            "destroy",
            "verified",
        )
    # The other account did not opt in: its pod with SSH down stays.
    assert run.instances[SSH_DOWN]["final_state"] == "running"
    assert_spend_never_above_baseline(run)


def test_the_readings_are_recorded_when_no_account_has_a_key(tmp_path: Path) -> None:
    # No account can be probed, so there is no prober at all: RunPod's readings are still
    # recorded (before, only when some account had a key), and they still prove busy only.
    other = '[[accounts]]\nname = "runpod-keyed"\nprovider = "runpod"\napi_key = "unused"\n'
    with simulating(NAME, tmp_path, f"{CONFIG}{other}") as sim:
        assert sim.assembly.prober is None
        result = finish(sim)
    assert result.actions == []
    for pod in (BURSTY, IDLE, SSH_DOWN):
        titles = [n["title"] for n in result.notifications_for(pod) if n["rule"] == "idle_gpu"]
        assert len(titles) == 1, (pod, titles)
        assert "looks idle per the provider" in titles[0]
