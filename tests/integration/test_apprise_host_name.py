"""Every message that reaches a phone names the host the watchdog runs on: the configured
``[watchdog] node_name``, else the machine's host name (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_apprise_delivery import NOW, message
from tests.support.http_receiver import HttpReceiver
from watchdog_gpu.config import load_settings
from watchdog_gpu.model import Severity
from watchdog_gpu.notify.delivery import notify_test
from watchdog_gpu.wiring import build_delivery


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver() as running:
        yield running


def write_config(tmp_path: Path, port: int, watchdog: str = "") -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f"[watchdog]\n{watchdog}\n"
        "[[notify.routes]]\n"
        f'url = "json://127.0.0.1:{port}/phone"\n'
        'severities = ["info", "warning", "critical"]\n',
        encoding="utf-8",
    )
    return config


def test_a_delivered_message_and_the_test_message_name_the_node(
    receiver: HttpReceiver, tmp_path: Path
) -> None:
    settings = load_settings(write_config(tmp_path, receiver.port, 'node_name = "gpu-box-7"'), {})
    delivery = build_delivery(settings, {})
    assert delivery is not None

    assert delivery.deliver(message(Severity.WARNING)).ok
    notify_test(delivery, NOW)

    warning, test = (json.loads(r.body)["message"] for r in receiver.received("/phone"))
    assert warning.startswith("Cost: $0.37/h")  # the message itself is unchanged
    assert warning.endswith("\n\nSent by watchdog-gpu on gpu-box-7.")
    assert test.endswith("\n\nSent by watchdog-gpu on gpu-box-7.")


def test_without_a_node_name_the_host_name_is_used(receiver: HttpReceiver, tmp_path: Path) -> None:
    delivery = build_delivery(load_settings(write_config(tmp_path, receiver.port), {}), {})
    assert delivery is not None

    assert delivery.deliver(message(Severity.CRITICAL)).ok

    [request] = receiver.received("/phone")
    assert json.loads(request.body)["message"].endswith(
        f"Sent by watchdog-gpu on {socket.gethostname()}."
    )
