"""The secrets canary at debug level, end to end: ``watchdog-gpu run`` with ``log_level =
"debug"`` delivers a real warning through an Apprise route whose token is in the URL path (as
Apprise services keep it) to a receiver on 127.0.0.1, and the token appears nowhere in its
output, although urllib3 under Apprise logs every request path at DEBUG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_daemon_run import (
    WAIT_SECONDS,
    child_environment,
    sim_serve,
    write_config,
)
from tests.support.http_receiver import HttpReceiver, free_port
from tests.support.prometheus import wait_for

pytestmark = pytest.mark.slow

API_KEY = "sim-vast-main"
# A made-up path segment standing for a service token (not a credential of anything real).
ROUTE_CANARY = "fake-path-canary-61d0f"


def write_scenario(path: Path) -> Path:
    """An interruptible instance paused at once: paused_interruptible warns about it."""
    path.write_text(
        """
name = "debug-canary"
start = "2026-03-02T20:00:00Z"
duration = "12h"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 200.0

[[accounts.instances]]
id = "9101"
name = "bid"
interruptible = true
compute_usd_per_hour = 0.22
disk_gb = 40
storage_usd_per_gb_month = 0.20
events = [{ at = "0s", state = "running", gpu_util = 90 }, { at = "1s", state = "paused" }]
""",
        encoding="utf-8",
    )
    return path


def has_request(receiver: HttpReceiver, path: str) -> bool:
    try:
        wait_for(f"a request to {path}", lambda: receiver.received(path), WAIT_SECONDS)
    except pytest.fail.Exception:
        return False
    return True


def test_at_debug_level_a_delivered_notification_leaves_its_url_token_in_no_log_line(
    tmp_path: Path,
) -> None:
    scenario = write_scenario(tmp_path / "scenario.toml")
    with sim_serve(tmp_path, scenario) as urls, HttpReceiver() as receiver:
        config = write_config(
            tmp_path,
            urls["vast"],
            free_port(),
            watchdog='log_level = "debug"\n',
            sections=(
                "[probe]\nenabled = false\n"
                '[rules.paused_interruptible]\nafter = "2m"\nwarn_before = "2m"\n'
                '[[notify.routes]]\nurl = { env = "WD_TEST_NOTIFY_URL" }\n'
            ),
        )
        environ = child_environment(
            tmp_path,
            WD_TEST_VAST_KEY=API_KEY,
            WD_TEST_NOTIFY_URL=f"json://127.0.0.1:{receiver.port}/{ROUTE_CANARY}",
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        try:
            delivered = has_request(receiver, f"/{ROUTE_CANARY}")
        finally:
            daemon.terminate()
            stdout, stderr = daemon.communicate(timeout=WAIT_SECONDS)

    assert delivered, stderr[-4000:]
    assert daemon.returncode == 0, stderr[-3000:]
    assert "level=debug" in stderr  # debug really was on
    assert "notification delivered" in stderr
    assert ROUTE_CANARY not in stderr
    assert ROUTE_CANARY not in stdout
