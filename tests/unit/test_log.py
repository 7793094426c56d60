"""Logging: key=value and JSON lines, quiet third-party loggers, secrets masked everywhere."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

import watchdog_gpu.log as log_module
from watchdog_gpu.log import (
    JournalFormatter,
    KeyValueFormatter,
    configure_logging,
    journal_priority,
    mask_tokens,
    redact,
    register_secret,
    register_url_secret,
)

CANARY = "canary-secret-7f3a9"


pytestmark = pytest.mark.usefixtures("restore_logging")


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
        ' level=info logger=watchdog_gpu.poll msg="poll done" account=vast-main instances=3 tick=7'
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


def journal_environ(stream: io.TextIOWrapper) -> dict[str, str]:
    """``$JOURNAL_STREAM`` as systemd sets it when ``stream`` is the journal."""
    status = os.fstat(stream.fileno())
    return {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}


def test_under_journald_lines_carry_the_priority_and_leave_the_time_to_the_journal(
    tmp_path: Path,
) -> None:
    with (tmp_path / "journal").open("w") as stream:
        configure_logging("debug", "text", stream=stream, environ=journal_environ(stream))
        logger = logging.getLogger("watchdog_gpu.y")
        logger.debug("detail")
        logger.info("hello")
        logger.warning("careful")
        logger.error("broken")
        logger.critical("fuse tripped")

    assert (tmp_path / "journal").read_text().splitlines() == [
        "<7>level=debug logger=watchdog_gpu.y msg=detail",
        "<6>level=info logger=watchdog_gpu.y msg=hello",
        "<4>level=warning logger=watchdog_gpu.y msg=careful",
        "<3>level=error logger=watchdog_gpu.y msg=broken",
        '<2>level=critical logger=watchdog_gpu.y msg="fuse tripped"',
    ]


def test_json_lines_under_journald_carry_the_priority_before_the_object(tmp_path: Path) -> None:
    with (tmp_path / "journal").open("w") as stream:
        configure_logging("info", "json", stream=stream, environ=journal_environ(stream))
        logging.getLogger("watchdog_gpu.y").warning("careful")

    line = (tmp_path / "journal").read_text().rstrip("\n")
    assert line.startswith("<4>{")
    assert json.loads(line.removeprefix("<4>"))["msg"] == "careful"


def test_every_line_of_a_traceback_keeps_the_error_priority() -> None:
    formatter = JournalFormatter(KeyValueFormatter(with_time=False))
    try:
        raise RuntimeError("provider said no")
    except RuntimeError:
        record = logging.getLogger("watchdog_gpu.t").makeRecord(
            "watchdog_gpu.t", logging.ERROR, __file__, 1, "poll failed", (), sys.exc_info()
        )

    lines = formatter.format(record).split("\n")

    assert len(lines) > 3
    assert all(line.startswith("<3>") for line in lines)
    assert lines[-1] == "<3>RuntimeError: provider said no"


def test_priorities_follow_sd_daemon_levels() -> None:
    levels = [logging.DEBUG, logging.INFO, 25, logging.WARNING, logging.ERROR, logging.CRITICAL]

    assert [journal_priority(level) for level in levels] == [7, 6, 6, 4, 3, 2]


def test_on_a_terminal_or_a_file_lines_stay_plain_with_their_time(tmp_path: Path) -> None:
    with (tmp_path / "log").open("w") as stream:
        configure_logging("info", "text", stream=stream, environ={"JOURNAL_STREAM": "1:2"})
        logging.getLogger("watchdog_gpu.y").warning("careful")

    line = (tmp_path / "log").read_text()
    assert line.startswith("time=")
    assert "<4>" not in line


def test_chatty_libraries_only_speak_from_warning() -> None:
    configure_logging("debug", "text", stream=io.StringIO(), environ={})

    for name in ("paramiko", "httpx", "apprise", "urllib3", "alembic"):
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


def test_a_url_secret_is_masked_in_its_parts_too() -> None:
    url = "tgram://123456789:AAbbCCdd-token/987654321/?format=text&secret=q-value-77"
    register_url_secret(url)

    assert redact(f"sending to {url}") == "sending to ***"
    assert redact("POST /987654321 HTTP/1.1") == "POST /*** HTTP/1.1"
    assert redact("host 123456789:AAbbCCdd-token") == "host ***"
    assert redact("secret=q-value-77") == "secret=***"
    assert redact("format=text") == "format=text"  # short words stay readable


def test_a_secret_is_masked_as_a_whole_token_never_inside_an_ordinary_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A route path like /watchdog is a URL part long enough to be a token; masking it as a
    # substring turned every line into "logger=***_gpu.daemon", which also spelled the secret.
    monkeypatch.setattr(log_module._registry, "secrets", frozenset())
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream, environ={})
    register_url_secret("json://127.0.0.1:8080/watchdog")

    logger = logging.getLogger("watchdog_gpu.daemon")
    logger.info("watchdog-gpu started; watchdog.example and my_watchdog stay readable")
    logger.warning("POST /watchdog HTTP/1.1")
    logger.warning("route json://127.0.0.1:8080/watchdog failed, path watchdog.")

    first, second, third = stream.getvalue().splitlines()
    assert "logger=watchdog_gpu.daemon" in first
    assert "watchdog-gpu started; watchdog.example and my_watchdog stay readable" in first
    assert "***" not in first
    assert 'msg="POST /*** HTTP/1.1"' in second
    assert 'msg="route *** failed, path ***."' in third


def test_json_lines_mask_whole_tokens_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_module._registry, "secrets", frozenset())
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, environ={})
    register_url_secret("tgram://123456789:AAbbCCdd-token/notify")

    logging.getLogger("watchdog_gpu.notify.delivery").warning(
        "notify_test sent to 123456789:AAbbCCdd-token", extra={"route": "notify"}
    )

    document = json.loads(stream.getvalue())
    assert document["logger"] == "watchdog_gpu.notify.delivery"
    assert document["msg"] == "notify_test sent to ***"
    assert document["route"] == "***"


def test_mask_tokens_respects_word_edges_and_masks_longest_first() -> None:
    secrets = frozenset({"abcdef", "abcdef-longer", "!odd-start"})

    assert mask_tokens("abcdef", secrets) == "***"
    assert mask_tokens("x=abcdef&y", secrets) == "x=***&y"
    assert mask_tokens("'abcdef'", secrets) == "'***'"
    assert mask_tokens("abcdef-longer", secrets) == "***"
    assert mask_tokens("abcdefgh xabcdef abcdef_x abcdef.com", secrets) == (
        "abcdefgh xabcdef abcdef_x abcdef.com"
    )
    assert mask_tokens("pass:!odd-start@host", secrets) == "pass:***@host"
