"""Scenario: a RunPod pod rented between two polls (runpod_rented_between_ticks.toml).

The pod is first listed starting, without a runtime and so without an uptime; its
``lastStatusChange`` ("Rented by User: <date>") dates its rent one minute before that sighting.
``report`` on the database the run leaves bills that minute too: for the pod and in total it
equals what the simulated RunPod billed, to the cent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scenarios.helpers import offset
from tests.scenarios.test_report import run_report, simulated
from watchdog_gpu.cli import EXIT_OK

NAME = "runpod_rented_between_ticks"
POD = "runpod-lab/podh100x8"


def test_report_bills_a_pod_from_its_rent_not_from_its_first_listing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, database, window = simulated(NAME, tmp_path)
    code, out, _ = run_report(capsys, "--db", database, *window, "--by", "instance", "--json")
    assert code == EXIT_OK
    report = json.loads(out)
    rows = {f"{row['account']}/{row['id']}": row["usd"] for row in report["rows"]}
    billed = run["instances"][POD]["spend_usd"]
    # 29 minutes at 8×H100 (rented at 1h1m, the simulation ends at 1h30m) plus its disk: the
    # minute before the first listing is $0.36 of it.
    hours = (offset("1h30m") - offset("1h1m")) / 3600
    assert billed == round(hours * (21.59 + 200 * 0.10 / 730), 2)
    assert round(rows[POD], 2) == billed
    assert round(report["total"]["usd"], 2) == run["totals"]["spend_usd"]
