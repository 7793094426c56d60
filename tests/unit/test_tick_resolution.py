"""Why an idle_gpu warning is resolved: only a busy GPU is "busy again"; an instance that lost
its samples (SSH down) is not idle any more — unknown is not idle — but it is not busy either,
and the resolution must say so (seen in ``watchdog-gpu demo`` at high speed, where starved probes
left gaps and the protected idle server was reported "busy again" without ever working)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import simulation

SCENARIO = """
name = "idle-then-change"
start = "2026-03-02T20:00:00Z"
duration = "1h30m"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 20.0

[[accounts.instances]]
id = "9001"
name = "notebook"
compute_usd_per_hour = 0.37
events = [
  {{ at = "0s", state = "running", gpu_util = 95 }},
  {{ at = "10m", gpu_util = 0 }},
  {{ at = "32m", {change} }},
]
"""


def resolutions(tmp_path: Path, change: str) -> tuple[list[str], list[str]]:
    """The reasons of the resolutions, and the actions, after the scripted change at 32 min
    (the idle warning went out at 30 min: idle since 10 min, limit 30 min, warned 10 before)."""
    scenario = parse_scenario(SCENARIO.format(change=change))
    with simulation(scenario, database=tmp_path / "sim.db") as sim:
        result = sim.run()
        warned = [e for e in sim.store.list_audit_events() if e.kind == "warning"]
        reasons = [e.message for e in sim.store.list_audit_events() if e.kind == "resolved"]
    assert [e.rule for e in warned] == ["idle_gpu"]
    return reasons, [a["action"] for a in result.actions]


@pytest.mark.parametrize("change", ['ssh = "down"', 'ssh = "garbage"'])
def test_an_idle_warning_cleared_by_missing_samples_does_not_claim_the_gpu_is_busy(
    tmp_path: Path, change: str
) -> None:
    reasons, actions = resolutions(tmp_path, change)

    assert actions == []  # no samples, no idle kill
    assert len(reasons) == 1
    assert "busy" not in reasons[0]
    assert "unknown is not idle" in reasons[0]


def test_an_idle_warning_cleared_by_work_says_the_gpu_is_busy_again(tmp_path: Path) -> None:
    reasons, actions = resolutions(tmp_path, "gpu_util = 90")

    assert actions == []
    assert reasons == ["GPU busy again"]
