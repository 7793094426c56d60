"""The demo's night: its clock, its re-dating, its configuration and how it tells the script."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.stopped_disk import StoppedDiskConfig
from watchdog_gpu.sim.demo import demo_scenario, demo_settings, upcoming
from watchdog_gpu.sim.night_clock import NightClock
from watchdog_gpu.sim.scenario import InstanceEvent, ScenarioInstance
from watchdog_gpu.sim.story import describe_event, short_id

REAL = datetime(2026, 12, 2, 17, 44, tzinfo=UTC)
NIGHT = datetime(2026, 12, 2, 22, 0, tzinfo=UTC)


def night_clock(speed: float = 720.0) -> tuple[NightClock, VirtualClock]:
    base = VirtualClock(REAL)
    return NightClock(speed, start=NIGHT, end=NIGHT + timedelta(hours=8), base=base), base


def test_the_night_stands_still_until_it_begins() -> None:
    clock, base = night_clock()
    base.advance(timedelta(seconds=5))  # building the daemon takes real time

    assert clock.now() == NIGHT
    assert clock.monotonic() == 0.0


def test_once_begun_one_real_second_is_speed_virtual_seconds() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    base.advance(timedelta(seconds=10))

    assert clock.now() == NIGHT + timedelta(hours=2)
    assert clock.monotonic() == pytest.approx(7200.0)
    clock.begin()  # a second call changes nothing
    assert clock.now() == NIGHT + timedelta(hours=2)


def test_the_night_stops_at_its_end_but_monotonic_time_goes_on() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    base.advance(timedelta(seconds=50))  # 10 virtual hours

    assert clock.now() == NIGHT + timedelta(hours=8)
    assert clock.monotonic() == pytest.approx(36000.0)


def test_freezing_stops_the_night_where_it_is() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    base.advance(timedelta(seconds=5))

    frozen = clock.freeze()
    base.advance(timedelta(seconds=5))

    assert frozen == NIGHT + timedelta(hours=1)
    assert clock.now() == frozen


def test_a_hold_keeps_the_night_at_the_instant_it_opened_then_it_catches_up() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    base.advance(timedelta(seconds=5))  # 01:00 of the night

    with clock.hold() as instant:
        base.advance(timedelta(milliseconds=2))  # a job's real work: 1.44 s of the night
        assert instant == NIGHT + timedelta(hours=1)
        assert clock.now() == instant
        with clock.hold() as nested:  # another job meanwhile shares the instant
            base.advance(timedelta(milliseconds=3))
            assert nested == instant
        assert clock.now() == instant
    assert clock.now() == NIGHT + timedelta(hours=1, seconds=3.6)
    assert clock.monotonic() == pytest.approx(3603.6)  # deadlines never stood still


def test_holds_from_several_threads_share_one_instant_until_the_last_closes() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    first, second = clock.hold(), clock.hold()
    opened = first.__enter__()
    base.advance(timedelta(milliseconds=1))
    assert second.__enter__() == opened
    first.__exit__(None, None, None)
    base.advance(timedelta(milliseconds=1))
    assert clock.now() == opened  # the second job still works at that instant
    second.__exit__(None, None, None)
    assert clock.now() == NIGHT + timedelta(seconds=1.44)


def test_a_night_begun_from_an_earlier_instant_catches_up_to_it() -> None:
    clock, base = night_clock(720.0)
    scheduled_from = base.monotonic()
    base.advance(timedelta(milliseconds=20))  # the first polls, while the night stood at start

    assert clock.now() == NIGHT
    clock.begin(scheduled_from)
    assert clock.now() == NIGHT + timedelta(seconds=14.4)


def test_freezing_inside_a_hold_stops_the_night_at_the_held_instant() -> None:
    clock, base = night_clock(720.0)
    clock.begin()
    with clock.hold() as instant:
        base.advance(timedelta(seconds=1))
        assert clock.freeze() == instant
    base.advance(timedelta(seconds=1))
    assert clock.now() == instant


def test_sleeping_a_virtual_minute_sleeps_a_fraction_of_a_real_second() -> None:
    clock, base = night_clock(600.0)
    clock.sleep(60)

    assert base.now() == REAL + timedelta(seconds=0.1)


def test_the_night_is_the_coming_one_at_its_time_of_day() -> None:
    scripted = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)

    assert upcoming(scripted, REAL) == NIGHT
    assert upcoming(scripted, NIGHT) == NIGHT
    late = datetime(2026, 12, 2, 23, 5, tzinfo=UTC)
    assert upcoming(scripted, late) == NIGHT + timedelta(days=1)
    assert upcoming(scripted, datetime(2025, 1, 1, tzinfo=UTC)) == datetime(
        2025, 1, 1, 22, 0, tzinfo=UTC
    )


def test_the_shipped_night_and_rules_make_a_valid_enforcing_configuration(
    tmp_path: Path,
) -> None:
    scenario = demo_scenario(REAL)
    settings = demo_settings(
        scenario,
        api_urls={p: f"http://127.0.0.1:{n}" for n, p in enumerate(("vast", "runpod", "lambda"))},
        phone_url="json://127.0.0.1:9/phone",
        database=tmp_path / "demo.db",
        metrics_port=0,
    )

    assert scenario.start == NIGHT
    assert scenario.duration == timedelta(hours=8)
    assert settings.watchdog.mode == "enforce"
    assert settings.watchdog.poll_interval == scenario.tick
    assert settings.watchdog.probe_interval == scenario.tick
    assert settings.rules.of(StoppedDiskConfig).after == timedelta(hours=2)
    assert settings.rules.of(BudgetConfig).accounts["runpod-lab"].daily_usd == 12.0
    assert settings.metrics.listen_address == "127.0.0.1"
    assert {a.name for a in settings.accounts} == {a.name for a in scenario.accounts}
    assert all((a.api_url or "").startswith("http://127.0.0.1:") for a in settings.accounts)
    # Every instance whose name says "keep" is what the demo protects; nothing else is.
    kept = [i.name for a in scenario.accounts for i in a.instances if "keep" in i.name]
    assert kept == ["keep-eval-server"]


def test_scripted_events_are_told_in_words() -> None:
    bid = ScenarioInstance(id="1", interruptible=True, compute_usd_per_hour=0.2, disk_gb=400)
    box = ScenarioInstance(id="2", gpu_count=8, gpu_name="H100 SXM", compute_usd_per_hour=21.5)

    def event(**fields: object) -> InstanceEvent:
        return InstanceEvent.model_validate({"at": "0s", **fields})

    assert describe_event(bid, event(state="running", gpu_util=96)) == "running, GPU 96%"
    assert describe_event(bid, event(state="paused")).startswith("paused by the provider")
    assert describe_event(box, event(state="starting")) == "launched: 8× H100 SXM, starting"
    assert describe_event(box, event(gpu_util=[97, 95])) == "GPUs 97%, 95%"
    assert describe_event(bid, event(state="stopped")) == "stopped; its 400 GB disk keeps billing"


def test_long_instance_ids_are_shortened_for_the_story() -> None:
    assert short_id("9001") == "9001"
    assert short_id("0920582c7ff041399e34823a0be62549") == "0920582c…"
