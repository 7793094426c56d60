"""Logging: key=value and JSON lines, quiet third-party loggers, secrets masked everywhere."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from watchdog_gpu.log import QUIET_LOGGERS, configure_logging, redact, register_secret

CANARY = "canary-secret-7f3a9"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """configure_logging changes the root logger: put it back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, previous in quiet.items():
        logging.getLogger(name).setLevel(previous)


def test_text_lines_are_key_value_with_extras() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream, environ={})

    logging.getLogger("watchdog_gpu.poll").info(
        "poll done account=%s instances=%d", "vast-main", 3, extra={"tick": 7}
    )
    logging.getLogger("watchdog_gpu.poll").debug("not shown")

    (line,) = stream.getvalue().splitlines()
    assert line.startswith("time=")
    assert line.endswith(
        ' level=info logger=watchdog_gpu.poll msg="poll done account=vast-main instances=3" tick=7'
    )


def test_json_lines_are_one_object_each() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream, environ={})

    logging.getLogger("watchdog_gpu.x").warning('quote " and\nnewline', extra={"account": "a"})

    (line,) = stream.getvalue().splitlines()
    document = json.loads(line)
    assert document["level"] == "warning"
    assert document["logger"] == "watchdog_gpu.x"
    assert document["msg"] == 'quote " and\nnewline'
    assert document["account"] == "a"
    assert document["time"].endswith("Z")


def test_under_journald_the_time_is_left_to_the_journal(tmp_path: Path) -> None:
    with (tmp_path / "journal").open("w") as stream:
        status = os.fstat(stream.fileno())
        environ = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        configure_logging("info", "text", stream=stream, environ=environ)
        logging.getLogger("watchdog_gpu.y").info("hello")
    assert (tmp_path / "journal").read_text() == "level=info logger=watchdog_gpu.y msg=hello\n"


def test_chatty_libraries_only_speak_from_warning() -> None:
    configure_logging("debug", "text", stream=io.StringIO(), environ={})

    for name in ("paramiko", "httpx", "apprise"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("watchdog_gpu").getEffectiveLevel() == logging.DEBUG


def test_configuring_again_replaces_only_its_own_handler() -> None:
    foreign = logging.NullHandler()
    logging.getLogger().addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()

    configure_logging("info", "text", stream=first, environ={})
    configure_logging("info", "json", stream=second, environ={})
    logging.getLogger("watchdog_gpu.z").info("once")

    assert first.getvalue() == ""
    assert json.loads(second.getvalue())["msg"] == "once"
    assert foreign in logging.getLogger().handlers


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud", "text", stream=io.StringIO())


def test_a_registered_secret_is_masked_in_message_args_extras_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream, environ={})
    register_secret(SecretStr(CANARY))
    logger = logging.getLogger("watchdog_gpu.leaky")

    with caplog.at_level(logging.INFO):
        logger.info(f"in the message {CANARY}")  # noqa: G004 - the mistake this guards against
        logger.info("in the args %s", CANARY)
        logger.info("in an extra", extra={"token": CANARY})
        try:
            raise RuntimeError(f"provider said {CANARY}")
        except RuntimeError:
            logger.exception("in a traceback")

    output = stream.getvalue()
    assert 'msg="in the message ***"' in output
    assert 'msg="in the args ***"' in output
    assert "token=***" in output
    assert "RuntimeError: provider said ***" in output
    assert CANARY not in output
    assert CANARY not in caplog.text
    assert "in the args ***" in caplog.text


def test_a_secret_inside_a_longer_secret_does_not_leave_the_rest_readable() -> None:
    register_secret("abcd-short")
    register_secret("abcd-short-and-longer")

    assert redact("key abcd-short-and-longer") == "key ***"


def test_very_short_values_are_not_registered() -> None:
    register_secret("abc")

    assert redact("abc abc") == "abc abc"
