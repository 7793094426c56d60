"""Scenario: billing outside ``running`` (stuck_starting.toml).

A RunPod pod whose container never comes up (``RUNNING`` with ``runtime: null``) and a Vast
instance stuck ``rebooting`` bill their compute rate while no GPU rule can see them. The
stuck_starting rule alerts each once it has billed so for its limit (15 min by default), with its
$/h; states the providers document as not billing compute yet (Vast ``loading``, Lambda
``booting``) and a pod that comes up in time are left alone.
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import Run, assert_within_tick, offset, run_scenario, tick_seconds

NAME = "stuck_starting"
LIMIT = offset("15m")
NEVER_UP = "runpod-lab/podnevercomesup"
REBOOTING = "vast-main/9801"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_scenario(NAME, tmp_path_factory.mktemp(NAME))


def _alerts(run: Run) -> dict[str, list[tuple[int, str]]]:
    alerts: dict[str, list[tuple[int, str]]] = {}
    for at, note in run.sent:
        if note.rule == "stuck_starting":
            key = f"{note.account}/{note.instance_id}"
            alerts.setdefault(key, []).append((at, f"{note.title}\n{note.body}"))
    return alerts


def test_only_the_instances_billing_compute_without_running_are_alerted(run: Run) -> None:
    assert sorted(_alerts(run)) == [NEVER_UP, REBOOTING]
    assert run.actions == []  # notify only


def test_a_pod_whose_container_never_comes_up_is_alerted_at_its_limit_with_its_rate(
    run: Run,
) -> None:
    ((at, text),) = _alerts(run)[NEVER_UP]
    assert_within_tick(at, LIMIT, tick_seconds(NAME))
    rate = 1.99 + 50 * 0.10 / 730  # compute + container disk, as RunPod bills a rented pod
    assert f"${rate:.3f}/h" in text
    assert "RUNNING (runtime not up)" in text


def test_an_instance_stuck_rebooting_is_alerted_at_its_limit_with_its_rate(run: Run) -> None:
    ((at, text),) = _alerts(run)[REBOOTING]
    assert_within_tick(at, offset("1h") + LIMIT, tick_seconds(NAME))
    rate = 0.42 + 40 * 0.15 / 720
    assert f"${rate:.3f}/h" in text
    assert "rebooting" in text


def test_the_stuck_instances_did_bill_the_whole_time(run: Run) -> None:
    # The simulated providers bill these states: the alert is about real money.
    assert run.instances[NEVER_UP]["final_state"] == "starting"
    assert run.instances[NEVER_UP]["spend_usd"] == pytest.approx(2 * (1.99 + 5 / 730), abs=0.01)
    assert run.instances[REBOOTING]["spend_usd"] == pytest.approx(
        2 * (0.42 + 40 * 0.15 / 720), abs=0.01
    )
