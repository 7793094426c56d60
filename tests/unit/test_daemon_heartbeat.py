"""The dead-man's switch against a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import logging

import pytest

from tests.support.http_receiver import HttpReceiver, free_port
from watchdog_gpu.config import Settings, WatchdogSection
from watchdog_gpu.errors import ConfigError
from watchdog_gpu.heartbeat import DeadMansSwitch, dead_mans_switch_from_settings
from watchdog_gpu.secrets import SecretReference

TOKEN = "fake-ping-token-5f3c1d2e"


def test_a_ping_gets_the_url_and_reports_success() -> None:
    with HttpReceiver() as receiver:
        switch = DeadMansSwitch(f"http://127.0.0.1:{receiver.port}/ping/{TOKEN}")
        try:
            assert switch.ping()
        finally:
            switch.close()

        assert [(r.method, r.path) for r in receiver.received()] == [("GET", f"/ping/{TOKEN}")]


@pytest.mark.parametrize(
    ("url_path", "fail_path"),
    [(f"/ping/{TOKEN}", f"/ping/{TOKEN}/fail"), (f"/{TOKEN}/", f"/{TOKEN}/fail")],
)
def test_a_failure_is_posted_to_the_fail_endpoint_with_its_reason(
    url_path: str, fail_path: str
) -> None:
    with HttpReceiver() as receiver:
        switch = DeadMansSwitch(f"http://127.0.0.1:{receiver.port}{url_path}")
        try:
            assert switch.fail("accounts=vast-main:auth failed_rules=-")
        finally:
            switch.close()

        [request] = receiver.received()

    assert (request.method, request.path) == ("POST", fail_path)
    assert request.body == b"accounts=vast-main:auth failed_rules=-"


def test_an_error_status_is_a_failed_ping_logged_without_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with HttpReceiver(status=503) as receiver:
        switch = DeadMansSwitch(f"http://127.0.0.1:{receiver.port}/ping/{TOKEN}")
        try:
            assert not switch.ping()
        finally:
            switch.close()

    assert "status=503" in caplog.text
    assert TOKEN not in caplog.text


def test_an_unreachable_switch_never_raises_and_never_logs_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    switch = DeadMansSwitch(f"http://127.0.0.1:{free_port()}/ping/{TOKEN}", timeout_seconds=2)
    try:
        assert not switch.ping()
    finally:
        switch.close()

    assert "error=ConnectError" in caplog.text
    assert TOKEN not in caplog.text


def test_a_ping_that_works_again_after_failures_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with HttpReceiver(status=500) as receiver:
        switch = DeadMansSwitch(f"http://127.0.0.1:{receiver.port}/{TOKEN}")
        try:
            assert not switch.ping()
            receiver.status = 200
            assert switch.ping()
            assert switch.ping()
        finally:
            switch.close()

    assert caplog.text.count("works again") == 1


def test_a_url_that_is_not_http_is_a_config_error_that_does_not_show_it() -> None:
    with pytest.raises(ConfigError) as raised:
        DeadMansSwitch(f"ftp://example.invalid/{TOKEN}")

    assert raised.value.problems[0].path == "watchdog.dead_mans_switch_url"
    assert TOKEN not in str(raised.value)


def test_no_url_configured_means_no_switch() -> None:
    assert dead_mans_switch_from_settings(Settings(), {}) is None


def test_the_url_comes_from_its_secret_reference() -> None:
    settings = Settings(
        watchdog=WatchdogSection(dead_mans_switch_url=SecretReference.env("DMS_URL"))
    )
    with HttpReceiver() as receiver:
        switch = dead_mans_switch_from_settings(
            settings, {"DMS_URL": f"http://127.0.0.1:{receiver.port}/{TOKEN}"}
        )
        assert switch is not None
        try:
            assert switch.ping()
        finally:
            switch.close()
        assert receiver.received(f"/{TOKEN}")


def test_a_missing_secret_is_a_config_error_naming_the_setting_and_the_source() -> None:
    settings = Settings(
        watchdog=WatchdogSection(dead_mans_switch_url=SecretReference.env("DMS_URL"))
    )

    with pytest.raises(ConfigError) as raised:
        dead_mans_switch_from_settings(settings, {})

    problem = raised.value.problems[0]
    assert problem.path == "watchdog.dead_mans_switch_url"
    assert "env DMS_URL" in problem.message
