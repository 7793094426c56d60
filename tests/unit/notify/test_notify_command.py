"""``watchdog-gpu notify test``: one line per route, exit code by outcome (real HTTP on
loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.http_receiver import HttpReceiver, free_port
from watchdog_gpu.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, main


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        "[[notify.routes]]\n"
        'url = { env = "TEST_PAGER_URL" }\n'
        'severities = ["critical"]\n'
        "\n"
        "[[notify.routes]]\n"
        'url = { env = "TEST_CHAT_URL" }\n'
        'severities = ["info", "warning"]\n'
    )
    return config


def test_every_configured_route_gets_the_test_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with HttpReceiver() as receiver:
        monkeypatch.setenv("TEST_PAGER_URL", f"json://127.0.0.1:{receiver.port}/pager-s3cret")
        monkeypatch.setenv("TEST_CHAT_URL", f"json://127.0.0.1:{receiver.port}/chat")

        code = main(["notify", "test", "--config", str(write_config(tmp_path))])

    out = capsys.readouterr().out.splitlines()
    assert code == EXIT_OK
    assert out[0].startswith("ok    notify.routes[0]  json://127.0.0.1:")
    assert out[0].endswith("(critical)")
    assert out[1].endswith("(info, warning)")
    assert "pager-s3cret" not in "\n".join(out)
    for path in ("/pager-s3cret", "/chat"):
        [request] = receiver.received(path)
        assert json.loads(request.body)["title"] == "watchdog-gpu test notification"


def test_a_failing_url_is_reported_and_fails_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with HttpReceiver() as receiver:
        code = main(
            [
                "notify",
                "test",
                "--url",
                f"json://127.0.0.1:{receiver.port}/up",
                "--url",
                f"json://127.0.0.1:{free_port()}/down",
            ]
        )

    out = capsys.readouterr().out.splitlines()
    assert code == EXIT_FAILURE
    assert out[0].startswith("ok    --url[0]")
    assert out[1].startswith("FAIL  --url[1]")
    assert "Connection error" in out[1]


def test_a_missing_url_secret_or_no_route_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TEST_PAGER_URL", raising=False)
    monkeypatch.setenv("TEST_CHAT_URL", "json://127.0.0.1:9/chat")
    empty = tmp_path / "empty.toml"
    empty.write_text("")

    missing = main(["notify", "test", "--config", str(write_config(tmp_path))])
    missing_err = capsys.readouterr().err
    none = main(["notify", "test", "--config", str(empty)])
    none_err = capsys.readouterr().err

    assert missing == EXIT_USAGE
    assert "notify.routes[0].url: env TEST_PAGER_URL (missing)" in missing_err
    assert none == EXIT_USAGE
    assert "no notification routes" in none_err


def test_a_failing_route_says_why_once(capsys: pytest.CaptureFixture[str]) -> None:
    with HttpReceiver(status=500) as broken:
        code = main(["notify", "test", "--url", f"json://127.0.0.1:{broken.port}/down"])

    [line] = capsys.readouterr().out.splitlines()
    assert code == EXIT_FAILURE
    assert line.startswith("FAIL  --url[0]  json://127.0.0.1:")
    reason = line.split(": ", 1)[1]
    assert reason  # Apprise's own words for the failure
    assert line.count(reason) == 1
    assert line.count(f"127.0.0.1:{broken.port}/down") == 1
    assert "FAILURE" not in line


def test_json_has_one_entry_per_route(capsys: pytest.CaptureFixture[str]) -> None:
    with HttpReceiver() as receiver:
        code = main(
            [
                "notify",
                "test",
                "--json",
                "--url",
                f"json://127.0.0.1:{receiver.port}/up",
                "--url",
                f"json://127.0.0.1:{free_port()}/down",
            ]
        )

    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_FAILURE
    assert report["ok"] is False
    up, down = report["routes"]
    assert (up["route"], up["ok"], up["error"]) == ("--url[0]", True, None)
    assert up["severities"] == ["info", "warning", "critical"]
    assert (down["route"], down["ok"]) == ("--url[1]", False)
    assert "Connection error" in down["error"]


def test_no_configuration_file_is_said_first_and_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WATCHDOG_GPU_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)

    code = main(["notify", "test"])

    captured = capsys.readouterr()
    assert code == EXIT_USAGE
    assert captured.out == ""
    assert captured.err.startswith("no config file found")
    assert "notification routes" not in captured.err
