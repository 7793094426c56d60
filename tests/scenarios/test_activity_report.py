"""Scenario: the spend report's GPU-hours and dollars by activity (activity_report.toml).

Expected figures come from the scenario's script: each instance's rate (compute plus its disk,
``disk_gb × storage_usd_per_gb_month / 720`` an hour on Vast), its GPUs, and when it works, goes
idle, goes out of sight or stops. Each boundary is seen at a tick (one a minute) and the first
samples of a run arrive within the first minute, hence the tolerance of a few minutes' worth."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import datetime
from typing import Any

import pytest

from tests.scenarios.helpers import ENFORCE, finish, load, simulating
from watchdog_gpu.cli import EXIT_OK, main

NAME = "activity_report"
CONFIG = f'{ENFORCE}\n[rules.idle_gpu]\nidle = "1h"\n'
HOURS_PER_MONTH = 720
# A boundary seen up to two ticks late, or the first samples of a run a minute in.
SLACK_HOURS = 3 / 60


def rate(name: str, instance_id: str) -> float:
    """What the scenario says the instance bills an hour while running (compute and disk)."""
    data = next(i for i in load(NAME).accounts[0].instances if i.id == instance_id)
    assert data.name == name
    return data.compute_usd_per_hour + data.disk_gb * data.storage_usd_per_gb_month / 720


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp(NAME)
    with simulating(NAME, tmp_path, CONFIG) as sim:
        run = finish(sim)
        database = sim.store.engine.url.render_as_string(hide_password=False)
        end = sim.clock.now()
    start = load(NAME).start
    window = ["--since", start.isoformat(), "--until", end.isoformat()]
    result: dict[str, Any] = {"run": run.json, "end": end, "start": start}
    for by in ("instance", "account", "day"):
        result[by] = _report_json(database, window, by)
    return result


def _report_json(database: str, window: list[str], by: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", "--db", database, *window, "--by", by, "--json"])
    assert code == EXIT_OK
    parsed: dict[str, Any] = json.loads(out.getvalue())
    return parsed


def row(report: dict[str, Any], instance_id: str) -> dict[str, Any]:
    return next(r for r in report["instance"]["rows"] if r["id"] == instance_id)


def destroyed_at(report: dict[str, Any], instance_id: str) -> datetime:
    (action,) = [a for a in report["instance"]["actions"] if a["instance_id"] == instance_id]
    assert (action["rule"], action["kind"], action["status"]) == ("idle_gpu", "destroy", "verified")
    moment: datetime = datetime.fromisoformat(action["at"])
    return moment


def test_a_job_busy_an_hour_then_idle_until_destroyed_bills_an_hour_of_each(
    report: dict[str, Any],
) -> None:
    forgotten = row(report, "9101")
    gpus, per_hour = 2, rate("train-forgotten", "9101")
    idle_hours = (destroyed_at(report, "9101") - report["start"]).total_seconds() / 3600 - 1.0
    assert idle_hours == pytest.approx(1.0, abs=SLACK_HOURS)  # idle = "1h" after an hour's work
    assert forgotten["busy_gpu_hours"] == pytest.approx(gpus * 1.0, abs=gpus * SLACK_HOURS)
    assert forgotten["busy_usd"] == pytest.approx(per_hour * 1.0, abs=per_hour * SLACK_HOURS)
    assert forgotten["idle_gpu_hours"] == pytest.approx(gpus * idle_hours, abs=gpus * SLACK_HOURS)
    assert forgotten["idle_usd"] == pytest.approx(per_hour * idle_hours, abs=per_hour * SLACK_HOURS)
    assert forgotten["blind_gpu_hours"] <= gpus * SLACK_HOURS
    assert forgotten["no_gpu_usd"] == 0


def test_an_hour_out_of_ssh_reach_is_blind_never_idle(report: dict[str, Any]) -> None:
    unreachable = row(report, "9102")
    gpus, per_hour = 2, rate("train-unreachable", "9102")
    assert unreachable["idle_gpu_hours"] == 0
    assert unreachable["idle_usd"] == 0
    # SSH down from 30m to 1h30m; working before and after, up to the end at 2h30m.
    assert unreachable["blind_gpu_hours"] == pytest.approx(gpus * 1.0, abs=gpus * SLACK_HOURS)
    assert unreachable["blind_usd"] == pytest.approx(per_hour * 1.0, abs=per_hour * SLACK_HOURS)
    assert unreachable["busy_gpu_hours"] == pytest.approx(gpus * 1.5, abs=gpus * SLACK_HOURS)
    assert unreachable["busy_usd"] == pytest.approx(per_hour * 1.5, abs=per_hour * SLACK_HOURS)


def test_a_stopped_instance_bills_its_disk_without_gpu_hours(report: dict[str, Any]) -> None:
    stopped = row(report, "9103")
    disk_per_hour = 200 * 0.36 / HOURS_PER_MONTH
    ran_hours, stopped_hours = 0.5, 2.0
    assert stopped["busy_gpu_hours"] == pytest.approx(ran_hours, abs=SLACK_HOURS)
    assert stopped["idle_gpu_hours"] == 0
    assert stopped["no_gpu_usd"] == pytest.approx(disk_per_hour * stopped_hours, abs=0.005)
    total_gpu_hours = sum(stopped[f"{a}_gpu_hours"] for a in ("idle", "blind", "busy"))
    assert total_gpu_hours == pytest.approx(ran_hours, abs=0.001)


@pytest.mark.parametrize("by", ["instance", "account", "day"])
def test_the_dollars_by_activity_add_up_to_the_spend_to_the_cent(
    report: dict[str, Any], by: str
) -> None:
    figures = report[by]
    for line in [figures["total"], *figures["rows"]]:
        parts = sum(line[f"{a}_usd"] for a in ("idle", "blind", "busy", "no_gpu"))
        assert round(parts, 2) == round(line["usd"], 2)
    for name in ("idle_gpu_hours", "blind_gpu_hours", "busy_gpu_hours", "no_gpu_usd"):
        assert sum(r[name] for r in figures["rows"]) == pytest.approx(
            figures["total"][name], abs=1e-3
        )
