"""``watchdog-gpu sim serve`` as a real subprocess."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.sim_world import SCENARIOS


@contextmanager
def sim_serve(*arguments: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", "sim", "serve", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else ""
        yield process, json.loads(line)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_one_json_line_of_urls_and_exits_0_on_a_signal(
    stop_signal: signal.Signals,
) -> None:
    with sim_serve() as (process, urls):
        assert set(urls) == {"vast", "runpod", "lambda"}
        assert all(url.startswith("http://127.0.0.1:") for url in urls.values())
        listed = httpx.get(
            urls["vast"] + "/api/v0/instances/",
            headers={"Authorization": "Bearer sim-vast-demo"},
            timeout=5,
        ).json()
        assert listed["instances_found"] == 4

        process.send_signal(stop_signal)
        stdout, _ = process.communicate(timeout=20)
        assert process.returncode == 0
        assert stdout == ""  # nothing after the one JSON line


def test_serve_plays_the_given_scenario_faster_than_real_time() -> None:
    with sim_serve("--scenario", str(SCENARIOS / "three_providers.toml"), "--speed", "60") as (
        process,
        urls,
    ):
        me = httpx.post(
            urls["runpod"] + "/graphql",
            json={"query": "query { myself { spendLimit pods { id } } }"},
            headers={"Authorization": "Bearer sim-runpod-a"},
            timeout=5,
        ).json()["data"]["myself"]
        assert me["spendLimit"] == 40
        assert len(me["pods"]) == 4
        process.terminate()
        process.communicate(timeout=20)
        assert process.returncode == 0


def test_an_invalid_scenario_exits_2_listing_problems_by_path(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text('name = "x"\nstart = "2026-03-02T20:00:00Z"\nduration = "often"\n')
    result = subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", "sim", "serve", "--scenario", str(scenario)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "duration: not a duration" in result.stderr
