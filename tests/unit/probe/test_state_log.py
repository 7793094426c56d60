"""One log line per host per state change, rate-limited, with a periodic summary."""

from __future__ import annotations

import logging

import pytest

from tests.unit.probe.test_prober import NOW, FakeRunner, instance
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.state_log import StateChangeLog

LOGGER = "watchdog_gpu.test.state_log"


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_a_host_is_logged_when_its_state_changes_and_not_while_it_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = StateChangeLog(logging.getLogger(LOGGER))

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        log.note("a/1", "ok", 0.0, "probe a/1 ok")  # a first ok: nothing to report
        log.note("a/1", "unreachable", 60.0, "probe a/1 unreachable")
        log.note("a/1", "unreachable", 120.0, "probe a/1 unreachable")
        log.note("a/1", "timeout", 180.0, "probe a/1 timeout")
        log.note("a/1", "ok", 240.0, "probe a/1 ok")
        log.note("b/2", "auth_failed", 240.0, "probe b/2 auth_failed")

    assert lines(caplog, logging.WARNING) == [
        "probe a/1 unreachable",
        "probe a/1 timeout",
        "probe b/2 auth_failed",
    ]
    assert lines(caplog, logging.INFO) == ["probe a/1 ok (recovered from timeout)"]
    assert lines(caplog, logging.DEBUG) == ["probe a/1 ok", "probe a/1 unreachable"]
    assert log.states() == {"ok": 1, "auth_failed": 1}


def test_a_thousand_unreachable_hosts_for_ten_minutes_give_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = StateChangeLog(logging.getLogger(LOGGER), max_lines_per_minute=60, summary_every=600)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        for minute in range(11):  # rounds at 0, 1, ..., 10 minutes
            for host in range(1000):
                log.note(f"acct/{host}", "unreachable", minute * 60.0, "probe %s", host)

    warnings = lines(caplog, logging.WARNING)
    # 60 change lines (the rate limit), then silence, then one summary at 10 minutes
    assert len(warnings) == 61
    summary = warnings[-1]
    assert summary.startswith("probe summary hosts=1000 unreachable=1000 state_changes=1000")
    assert "not_logged=940" in summary


def test_the_summary_is_quiet_when_every_host_is_fine(caplog: pytest.LogCaptureFixture) -> None:
    log = StateChangeLog(logging.getLogger(LOGGER), summary_every=600)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        for minute in range(21):
            log.note("a/1", "ok", minute * 60.0, "probe a/1 ok")

    assert caplog.records == []


def test_a_forgotten_host_leaves_the_summary_and_is_new_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = StateChangeLog(logging.getLogger(LOGGER))
    log.note("a/1", "unreachable", 0.0, "probe a/1 unreachable")

    log.forget("a/1")

    assert log.states() == {}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert log.note("a/1", "unreachable", 1.0, "probe a/1 unreachable")


def test_the_prober_logs_an_unreachable_host_once_over_many_rounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock(NOW)
    runner = FakeRunner({"i-1": ProbeError("connection refused", status="unreachable")})
    prober = Prober(runner, clock=clock)
    snapshots = [instance("i-1"), instance("i-2")]

    with caplog.at_level(logging.DEBUG, logger="watchdog_gpu.probe.prober"):
        for _round in range(5):
            outcomes = prober.probe_all(snapshots, clock.now())
            clock.sleep(60)

    assert [o.status for o in outcomes] == [ProbeStatus.UNREACHABLE, ProbeStatus.OK]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "instance=acct/i-1 status=unreachable" in warnings[0]
    assert not [r for r in caplog.records if r.levelno == logging.INFO]
