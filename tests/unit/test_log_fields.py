"""Log lines carry real fields: a logfmt parser and ``json.loads`` find ``instance``,
``account``, ``state`` … as top-level keys, not inside ``msg``."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import logfmt  # a real logfmt parser (a port of the reference Go parser), not our own
import pytest

from watchdog_gpu.log import configure_logging, register_secret, split_message

pytestmark = pytest.mark.usefixtures("restore_logging")

SECRET = "sk-fields-canary-41d9"


def emit_probe_and_action_lines() -> None:
    """Two lines as the code base writes them: a phrase, then ``key=value`` pairs."""
    logging.getLogger("watchdog_gpu.probe.streams").warning(
        "probe stream instance=%s account=%s state=%s status=%s detail=%s",
        "vast-main/9001",
        "vast-main",
        "backoff",
        "unreachable",
        "connection refused by 127.0.0.1:2222",
    )
    logging.getLogger("watchdog_gpu.executor").info(
        "action=%s account=%s instance=%s rule=%s status=%s dry_run=%s detail=%r",
        "destroy",
        "vast-main",
        "9001",
        "forgotten_idle",
        "done",
        "false",
        "provider said: gone",
        extra={"tick": 7},
    )


def test_logfmt_lines_have_top_level_fields_for_a_real_parser() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream, environ={})

    emit_probe_and_action_lines()

    probe, action = (logfmt.parse_line(line) for line in stream.getvalue().splitlines())
    assert probe["level"] == "warning"
    assert probe["logger"] == "watchdog_gpu.probe.streams"
    assert probe["msg"] == "probe stream"
    assert probe["instance"] == "vast-main/9001"
    assert probe["account"] == "vast-main"
    assert probe["state"] == "backoff"
    assert probe["status"] == "unreachable"
    assert probe["detail"] == "connection refused by 127.0.0.1:2222"
    assert action["msg"] == ""
    assert (action["action"], action["account"], action["instance"], action["rule"]) == (
        "destroy",
        "vast-main",
        "9001",
        "forgotten_idle",
    )
    assert action["detail"] == "provider said: gone"  # %r's quotes are not part of the value
    assert action["tick"] == "7"


def test_json_lines_have_top_level_fields_typed_where_obvious() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, environ={})

    emit_probe_and_action_lines()
    logging.getLogger("watchdog_gpu.store.leadership").info("leading node=%s epoch=%d", "a", 3)

    probe, action, leading = (json.loads(line) for line in stream.getvalue().splitlines())
    assert probe["msg"] == "probe stream"
    assert (probe["instance"], probe["account"], probe["state"]) == (
        "vast-main/9001",
        "vast-main",
        "backoff",
    )
    assert probe["detail"] == "connection refused by 127.0.0.1:2222"
    assert action["instance"] == "9001"  # an identifier stays text, however it reads
    assert action["dry_run"] is False
    assert action["tick"] == 7
    assert (leading["msg"], leading["node"], leading["epoch"]) == ("leading", "a", 3)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_under_journald_fields_keep_the_priority_prefix(tmp_path: Path, fmt: str) -> None:
    with (tmp_path / "journal").open("w") as stream:
        status = os.fstat(stream.fileno())
        environ = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        configure_logging(
            "info", "text" if fmt == "text" else "json", stream=stream, environ=environ
        )
        emit_probe_and_action_lines()

    probe, action = (tmp_path / "journal").read_text().splitlines()
    assert probe.startswith("<4>")
    assert action.startswith("<6>")
    parse = logfmt.parse_line if fmt == "text" else json.loads
    assert parse(probe[3:])["instance"] == "vast-main/9001"
    assert parse(action[3:])["rule"] == "forgotten_idle"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_stay_masked_in_lifted_fields(fmt: str) -> None:
    stream = io.StringIO()
    configure_logging("info", "text" if fmt == "text" else "json", stream=stream, environ={})
    register_secret(SECRET)

    logging.getLogger("watchdog_gpu.x").warning(
        "provider refused account=%s error=%s", "vast-main", f"bad key {SECRET} rejected"
    )
    logging.getLogger("watchdog_gpu.x").warning("sent", extra={"token": SECRET})

    output = stream.getvalue()
    assert SECRET not in output
    parse = logfmt.parse_line if fmt == "text" else json.loads
    refused, sent = (parse(line) for line in output.splitlines())
    assert (refused["account"], refused["error"]) == ("vast-main", "bad key *** rejected")
    assert sent["token"] == "***"


def test_a_message_splits_into_its_phrase_and_trailing_fields() -> None:
    assert split_message("stopped") == ("stopped", [])
    assert split_message("cannot start: no such file") == ("cannot start: no such file", [])
    assert split_message("standing by node=b leader=a leader_since=unknown") == (
        "standing by",
        [("node", "b"), ("leader", "a"), ("leader_since", "unknown")],
    )
    # a quoted value may hold what looks like a field
    assert split_message("x detail='a b=c' n=1") == ("x", [("detail", "a b=c"), ("n", "1")])
    # a field named like the line's own keys is not lifted (it would overwrite them)
    assert split_message("odd level=3 n=1") == ("odd level=3 n=1", [])
