"""Run the scenarios of this directory through the real simulator and read its JSON.

Every scenario test is a scenario file here (``<name>.toml``) plus assertions on the JSON object
``watchdog-gpu simulate --json`` prints (the contract of ``docs/scenario-format.md``). The
helpers run the same code path as the command — :func:`~watchdog_gpu.sim.simulate.simulation`
with the settings ``--config`` would load — in this process, so a test can also step a run tick
by tick, restart the engine in the middle, or look at the notification keys the JSON leaves out.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.support.databases import migrated_database_url
from watchdog_gpu.config import Settings, load_settings
from watchdog_gpu.durations import parse_duration
from watchdog_gpu.model import PlannedNotification
from watchdog_gpu.sim.scenario import Scenario, parse_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

SCENARIOS = Path(__file__).resolve().parent

ENFORCE = '[watchdog]\nmode = "enforce"\n'
"""The start of a ``--config`` file in enforce mode (a config file defaults to monitor)."""


def scenario_data(name: str) -> dict[str, Any]:
    """The raw TOML table of ``tests/scenarios/<name>.toml`` (to vary it before parsing)."""
    with (SCENARIOS / f"{name}.toml").open("rb") as handle:
        return tomllib.load(handle)


def load(name_or_data: str | Mapping[str, Any]) -> Scenario:
    """A validated scenario: a file name of this directory (without ``.toml``) or a table."""
    data = scenario_data(name_or_data) if isinstance(name_or_data, str) else name_or_data
    return parse_scenario(data)


def settings_from(config: str | None, tmp_path: Path) -> Settings | None:
    """What ``--config FILE`` would load for ``config`` (TOML text written to ``tmp_path``);
    ``None`` (every rule's documented defaults in enforce mode) without one."""
    if config is None:
        return None
    path = tmp_path / "scenario-config.toml"
    path.write_text(config, encoding="utf-8")
    return load_settings(path, {})


@dataclass(frozen=True)
class Run:
    """A finished run: the JSON object and what the JSON does not show."""

    json: dict[str, Any]
    sent: tuple[tuple[int, PlannedNotification], ...]  # (offset_s, notification) as delivered
    api_calls: tuple[tuple[int, str, str, str], ...]  # (offset_s, account, instance, action)

    @property
    def actions(self) -> list[dict[str, Any]]:
        return list(self.json["actions"])

    @property
    def notifications(self) -> list[dict[str, Any]]:
        return list(self.json["notifications"])

    @property
    def instances(self) -> dict[str, dict[str, Any]]:
        return dict(self.json["instances"])

    def actions_for(self, instance: str) -> list[dict[str, Any]]:
        """Actions on ``"account/id"``."""
        return [a for a in self.actions if f"{a['account']}/{a['instance']}" == instance]

    def notifications_for(self, instance: str) -> list[dict[str, Any]]:
        """Notifications about ``"account/id"``."""
        return [n for n in self.notifications if f"{n['account']}/{n['instance']}" == instance]

    def notification_keys(self) -> list[str]:
        return [note.idempotency_key for _offset, note in self.sent]


@contextmanager
def simulating(
    scenario: str | Mapping[str, Any], tmp_path: Path, config: str | None = None
) -> Iterator[Simulation]:
    """A ready :class:`Simulation` of ``scenario`` (see :func:`load`) under ``config``."""
    with simulation(
        load(scenario),
        settings_from(config, tmp_path),
        database_url=migrated_database_url(tmp_path, "simulate"),
    ) as sim:
        yield sim


def finish(sim: Simulation) -> Run:
    """Run ``sim`` to the end of its scenario and collect the outcome."""
    result = sim.run().to_json()
    start = sim.scenario.start
    sent = tuple((round((at - start).total_seconds()), note) for at, note in sim.capture.sent)
    calls = tuple(
        (round((call.at - start).total_seconds()), call.account, call.instance_id, call.action)
        for call in sim.world.actions()
        if call.source == "api"
    )
    return Run(result, sent, calls)


def run_scenario(
    scenario: str | Mapping[str, Any], tmp_path: Path, config: str | None = None
) -> Run:
    """Simulate ``scenario`` from start to end, as ``watchdog-gpu simulate --json`` does."""
    with simulating(scenario, tmp_path, config) as sim:
        return finish(sim)


def tick_seconds(scenario: str | Mapping[str, Any]) -> int:
    return round(load(scenario).tick.total_seconds())


def offset(text: str) -> int:
    """Seconds of a duration written as in a scenario (``"2h30m"``)."""
    return round(parse_duration(text).total_seconds())


def assert_spend_never_above_baseline(run: Run) -> None:
    """The watchdog never makes anything cost more: per instance and in total."""
    for key, figures in run.instances.items():
        assert figures["spend_usd"] <= figures["spend_without_watchdog_usd"], key
    totals = run.json["totals"]
    assert totals["spend_usd"] <= totals["spend_without_watchdog_usd"]
    assert totals["saved_usd"] >= 0


def assert_within_tick(actual: int, expected: int, tick: int) -> None:
    assert expected - tick <= actual <= expected + tick, (
        f"offset {actual}s is not within one tick ({tick}s) of {expected}s "
        f"({timedelta(seconds=actual)} vs {timedelta(seconds=expected)})"
    )
