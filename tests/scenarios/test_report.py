"""``watchdog-gpu report`` on the database a scenario leaves: the spend it reads from the ledger
is what the simulated providers billed (``simulate``'s totals, to the cent), its CSV opens in a
spreadsheet, and bad arguments are a clear exit 2."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.helpers import finish, load, simulating
from watchdog_gpu.cli import EXIT_OK, EXIT_USAGE, main


def run_report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def simulated(name: str, tmp_path: Path) -> tuple[dict[str, Any], str, list[str]]:
    """simulate's JSON, the URL of the database the run left (an SQLite file, or PostgreSQL
    when the suite runs on it), and ``--since``/``--until`` of its span."""
    scenario = load(name)
    with simulating(name, tmp_path) as sim:
        result = finish(sim)
        database = sim.store.engine.url.render_as_string(hide_password=False)
        end = sim.clock.now()
    window = ["--since", scenario.start.isoformat(), "--until", end.isoformat()]
    return result.json, database, window


@pytest.mark.parametrize("name", ["forgotten_idle", "budget_two_providers"])
def test_report_totals_match_what_simulate_says_was_billed(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, database, window = simulated(name, tmp_path)
    for by in ("account", "instance", "day"):
        code, out, _ = run_report(capsys, "--db", database, *window, "--by", by, "--json")
        assert code == EXIT_OK
        report = json.loads(out)
        assert round(report["total"]["usd"], 2) == run["totals"]["spend_usd"]
        assert sum(row["usd"] for row in report["rows"]) == pytest.approx(
            report["total"]["usd"], abs=1e-3
        )
    code, out, _ = run_report(capsys, "--db", database, *window, "--by", "instance", "--json")
    rows = {f"{r['account']}/{r['id']}": r["usd"] for r in json.loads(out)["rows"]}
    for key, figures in run["instances"].items():
        assert round(rows.get(key, 0.0), 2) == figures["spend_usd"], key


def test_report_lists_each_destroy_with_the_rate_it_stopped_and_an_estimated_saving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, database, window = simulated("forgotten_idle", tmp_path)
    code, out, _ = run_report(capsys, "--db", database, *window, "--by", "rule", "--json")
    assert code == EXIT_OK
    report = json.loads(out)
    assert [(a["rule"], a["kind"], a["status"]) for a in report["actions"]] == [
        (a["rule"], a["action"], "verified") for a in run["actions"] if a["action"] != "notify"
    ]
    (action,) = report["actions"]
    assert action["usd_per_hour_at_call"] == pytest.approx(0.37 + 50 * 0.20 / 720, abs=0.01)
    assert action["stopped_usd_per_hour"] == action["usd_per_hour_at_call"]
    hours = (
        datetime.fromisoformat(report["end"]) - datetime.fromisoformat(action["at"])
    ).total_seconds() / 3600
    assert action["estimated_saving_usd"] == pytest.approx(
        action["stopped_usd_per_hour"] * hours, abs=1e-3
    )
    assert report["estimated_saving_usd"] == action["estimated_saving_usd"]
    code, text, _ = run_report(capsys, "--db", database, *window)
    assert code == EXIT_OK
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "idle_gpu" in text
    assert "verified" in text


@pytest.mark.parametrize("by", ["account", "instance", "day", "rule"])
def test_report_csv_has_one_header_row_iso_dates_and_plain_numbers(
    by: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run, database, window = simulated("forgotten_idle", tmp_path)
    code, out, _ = run_report(capsys, "--db", database, *window, "--by", by, "--csv")
    assert code == EXIT_OK
    header, *rows = list(csv.reader(io.StringIO(out)))
    assert rows
    assert all(len(row) == len(header) for row in rows)
    dates = {"start", "end", "day", "at"} & set(header)
    numbers = {name for name in header if name.endswith(("usd", "hours", "usd_per_hour"))}
    assert dates
    assert numbers
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        for name in dates:
            datetime.fromisoformat(cells[name])
        for name in numbers:
            float(cells[name])


def test_report_bad_arguments_exit_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run, database, _window = simulated("forgotten_idle", tmp_path)
    code, _, err = run_report(capsys, "--db", database, "--since", "banana")
    assert code == EXIT_USAGE
    assert "--since: 'banana' is neither a duration" in err
    with pytest.raises(SystemExit) as exited:
        main(["report", "--db", database, "--json", "--csv"])
    assert exited.value.code == EXIT_USAGE
    assert "not allowed with argument" in capsys.readouterr().err
    code, _, err = run_report(capsys, "--db", str(tmp_path / "missing.db"))
    assert code == EXIT_USAGE
    assert "does not exist" in err
    assert not (tmp_path / "missing.db").exists()
