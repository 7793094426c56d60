"""An alert already in the outbox is not recorded again on every tick.

A hygiene issue (or any notify-only finding) stands for its whole episode: the planner decides
its alert again on every tick, and recording it wrote nothing (its key is in the outbox, and
notifications are never deleted). The tick now skips the decision's transaction when the view
it decided from already holds the key: what the database holds is unchanged — one alert, one
audit event — and the store is asked once, not once per tick.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import simulation

SCENARIO = """
name = "standing-alert"
start = "2026-03-02T20:00:00Z"
duration = "10m"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 20.0
ssh_keys = [{ name = "pasted", public_key = "/home/me/.ssh/id_ed25519.pub" }]

[[accounts.instances]]
id = "9001"
name = "trainer"
compute_usd_per_hour = 0.37
events = [{ at = "0s", state = "running", gpu_util = 95 }]
"""


def test_a_standing_alert_is_recorded_once_and_not_asked_for_again(tmp_path: Path) -> None:
    asked: Counter[str] = Counter()
    with simulation(parse_scenario(SCENARIO), database=tmp_path / "sim.db") as sim:
        store = sim.store
        record = store.record_decision

        def counted(now: Any, **kwargs: Any) -> bool:
            asked[kwargs["audit_kind"]] += 1
            return record(now, **kwargs)

        store.record_decision = counted  # type: ignore[method-assign]
        load = store.load_fleet_view

        def loaded(*args: Any, **kwargs: Any) -> Any:
            asked["view"] += 1
            return load(*args, **kwargs)

        store.load_fleet_view = loaded  # type: ignore[method-assign]
        result = sim.run()
        alerts = [e for e in store.list_audit_events() if e.kind == "alert"]

    assert asked.pop("view") >= 10  # an evaluation a tick
    assert [e.rule for e in alerts] == ["hygiene"]  # one episode, one alert
    assert len(result.notifications) == 1
    assert "hygiene" in str(result.notifications[0])
    assert asked == {"alert": 1}  # not once per tick
