"""The act job acts on the latest *committed* evaluation, read from the store, never on one that
another thread has begun: on PostgreSQL an act run beside an evaluation that has not committed
must not take the missing findings for cleared conditions (cancelling the action, withdrawing
its warning). Real engine, simulator servers, a real PostgreSQL server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import watchdog_gpu.tick
from tests.support.databases import postgres_server
from tests.support.scenario_texts import one_busy_instance
from watchdog_gpu.config import Settings, WatchdogSection
from watchdog_gpu.jobs import Jobs, Progress
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.plan import plan as real_plan
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import simulation

pytestmark = pytest.mark.postgres

SCENARIO = one_busy_instance("act-race", start="2030-01-01T22:00:00Z", duration="1h")
LIMIT = MaxRuntimeConfig(limit=timedelta(minutes=3, seconds=30), warn_before=timedelta(minutes=1))
TICK = timedelta(seconds=60)
BOUND = 30.0  # seconds: a generous bound for a thread to reach a point, never a timing


@pytest.fixture
def pg_url() -> Iterator[str]:
    server = postgres_server()
    url = server.create_database()
    yield url
    server.drop_database(url)


def test_an_act_run_beside_an_uncommitted_evaluation_keeps_the_action(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = parse_scenario(SCENARIO)
    base = Settings(watchdog=WatchdogSection(mode="enforce"))
    base = base.model_copy(update={"rules": base.rules.model_copy(update={"max_runtime": LIMIT})})
    with simulation(scenario, base, database_url=pg_url) as sim:
        store, watchdog = sim.store, sim.assembly.watchdog
        jobs = Jobs(watchdog, sim.clock, Progress(sim.clock), poll_interval=TICK)
        # Ticks without the act job until the runtime limit's destroy is planned.
        for minute in range(6):
            sim.clock.set(scenario.start + minute * TICK)
            jobs.poll("vast-main")
            jobs.probe()
            jobs.evaluate()
            if store.list_actions():
                break
        (action,) = store.list_actions()
        assert action.status == ActionStatus.PENDING
        assert store.get_notification(action.episode_key + ":warning") is not None

        # The next evaluation stops inside its transaction: findings written, not committed.
        inside, release = threading.Event(), threading.Event()

        def plan_then_hold(*args: Any, **kwargs: Any) -> Any:
            inside.set()
            assert release.wait(BOUND)
            return real_plan(*args, **kwargs)

        monkeypatch.setattr(watchdog_gpu.tick, "plan", plan_then_hold)
        sim.clock.set(sim.clock.now() + TICK)
        evaluation = threading.Thread(target=jobs.evaluate)
        evaluation.start()
        try:
            assert inside.wait(BOUND)
            sim.clock.set(sim.clock.now() + timedelta(seconds=1))
            jobs.act()  # the act job's thread meanwhile
        finally:
            release.set()
            evaluation.join(BOUND)
        assert not evaluation.is_alive()

        after = store.get_action(action.idempotency_key)
        assert after is not None
        assert after.status != ActionStatus.CANCELLED, after.result
        kinds = [event.kind for event in store.list_audit_events()]
        assert "action_cancelled" not in kinds
        assert store.get_notification(action.episode_key + ":resolution") is None
