"""``watchdog-gpu status`` says how each host is probed: ``[stream]`` or ``[burst]`` after its GPU
activity (the latest probe's ``probe_outcomes.mode``; ``docs/probe.md``), from a real SQLite file.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import NOW, freeze_clock, isolate, run
from tests.integration.store_builders import instance, observation, probe, sample
from watchdog_gpu.model import InstanceState
from watchdog_gpu.store import Store


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


def instance_line(output: str, key: str) -> str:
    [line] = [line for line in output.splitlines() if line.startswith(key)]
    return line


def test_each_host_shows_the_mode_its_latest_probe_used(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = NOW - timedelta(minutes=1)
    store.record_observation(
        observation(
            instance("101", at=NOW),
            instance("102", at=NOW),
            instance("103", at=NOW),
            instance("104", InstanceState.STOPPED, at=NOW),
            at=NOW,
        ),
        NOW,
    )
    streamed = replace(probe("101", NOW, sample("101", NOW, 0, 80.0)), mode="stream")
    # 102 streamed a minute ago, then fell back to burst mode: the latest probe decides.
    store.record_probe(replace(probe("102", earlier, sample("102", earlier)), mode="stream"))
    fell_back = replace(probe("102", NOW, sample("102", NOW, 0, 0.0)), mode="burst")
    older = probe("103", NOW, sample("103", NOW, 0, 0.0))  # recorded before modes existed
    stopped = replace(probe("104", earlier, sample("104", earlier)), mode="stream")
    store.record_probes([streamed, fell_back, older, stopped])
    db = str(tmp_path / "watchdog-gpu.db")

    text = run(capsys, "status", "--db", db).out

    assert "busy [stream]" in instance_line(text, "vast-main/101")
    assert "[burst]" in instance_line(text, "vast-main/102")
    assert "[stream]" not in instance_line(text, "vast-main/102")
    assert "[" not in instance_line(text, "vast-main/103")
    assert "[" not in instance_line(text, "vast-main/104")  # not running: no probe to speak of
    as_json = json.loads(run(capsys, "status", "--db", db, "--json").out)
    modes = {item["instance_id"]: item["gpu"]["probe_mode"] for item in as_json["instances"]}
    assert modes == {"101": "stream", "102": "burst", "103": None, "104": "stream"}
