"""The shipped dashboard and alert rules against a real daemon: ``watchdog-gpu run`` (a
subprocess) polls and probes ``watchdog-gpu sim serve`` (another subprocess), a real
Prometheus scrapes the daemon's endpoint on 127.0.0.1, and every dashboard query returns data
and every series every alert rule reads exists.

A query that returns nothing on a running daemon is a panel that is always empty or an alert
that can never fire (a renamed metric, a label that is not there, a series that only appears
after the first event). The alert expressions themselves are conditions that stay quiet on a
healthy daemon, so for them the test asks for the series they are built from.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.sshd import write_ed25519_key
from tests.integration.test_daemon_run import child_environment, sim_serve, write_config
from tests.support.prometheus import (
    PrometheusServer,
    alert_selectors,
    dashboard_queries,
    free_port,
    running_prometheus,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

API_KEY = "sim-vast-main"  # the simulator's key for account vast-main
# Rates and increases need a few scrapes inside their windows; a cold start takes a few seconds.
DATA_WAIT_SECONDS = 90.0


def write_scenario(path: Path, ssh_port: int) -> Path:
    """A Vast account with a busy running instance (its SSH port refuses: probes fail and are
    timed and counted) and a stopped one (idle/paused/stopped time for the top-k table)."""
    path.write_text(
        f"""
name = "prometheus-daemon"
start = "2026-03-02T20:00:00Z"
duration = "12h"
tick = "60s"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 200.0

[[accounts.instances]]
id = "9001"
name = "train"
gpu_name = "RTX 4090"
compute_usd_per_hour = 0.37
disk_gb = 50
storage_usd_per_gb_month = 0.20
ssh_port = {ssh_port}
events = [{{ at = "0s", state = "running", gpu_util = 95 }}]

[[accounts.instances]]
id = "9002"
name = "parked"
gpu_name = "RTX 4090"
compute_usd_per_hour = 0.37
disk_gb = 100
storage_usd_per_gb_month = 0.20
events = [{{ at = "0s", state = "running", gpu_util = 0 }}, {{ at = "1s", state = "stopped" }}]
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tmp_path = tmp_path_factory.mktemp("daemon")
    scenario = write_scenario(tmp_path / "scenario.toml", free_port())
    key_file = tmp_path / "id_ed25519"
    write_ed25519_key(key_file)
    metrics_port = free_port()
    with sim_serve(tmp_path, scenario) as urls:
        config = write_config(
            tmp_path,
            urls["vast"],
            metrics_port,
            watchdog="",
            sections="[rules.budget]\ndaily_usd = 50.0\n",  # a ceiling for the budget panels
            account=f'[accounts.ssh]\nkey_file = "{key_file}"\n',
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=child_environment(tmp_path, WD_TEST_VAST_KEY=API_KEY),
        )
        try:
            with running_prometheus(metrics_port, tmp_path_factory.mktemp("prom")) as server:
                yield server
        finally:
            daemon.terminate()
            try:
                _, stderr = daemon.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                _, stderr = daemon.communicate(timeout=10)
    assert "Traceback" not in stderr, stderr[-3000:]


@pytest.mark.parametrize(("title", "expression"), dashboard_queries())
def test_every_dashboard_query_returns_data_from_a_live_daemon(
    prometheus: PrometheusServer, title: str, expression: str
) -> None:
    result = wait_for(
        f"data for panel {title!r}: {expression}",
        lambda: prometheus.query(expression),
        DATA_WAIT_SECONDS,
    )

    assert result, title


def has_data(prometheus: PrometheusServer, selector: str) -> bool:
    """Whether ``selector`` returns series within 20 s (a counter's first samples)."""
    try:
        wait_for(selector, lambda: prometheus.query(selector), 20)
    except pytest.fail.Exception:
        return False
    return True


# Series only watchdogs sharing a PostgreSQL database serve (docs/postgresql.md); this daemon
# is alone on SQLite. tests/integration/test_postgres_daemons.py reads both from live daemons.
POSTGRESQL_ONLY = {"watchdog_gpu_leader", "watchdog_gpu_standby"}


def test_every_series_every_alert_reads_exists_on_a_live_daemon(
    prometheus: PrometheusServer,
) -> None:
    rules = wait_for("the alert rules", prometheus.alert_rules)
    empty: list[str] = []
    for name, rule in sorted(rules.items()):
        selectors = alert_selectors(rule["query"])
        assert selectors, f"{name}: no series found in {rule['query']!r}"
        for selector in selectors:
            if selector.split("{")[0] in POSTGRESQL_ONLY:
                continue
            if not has_data(prometheus, selector):
                empty.append(f"{name}: {selector}")

    assert empty == []
    assert {rule["health"] for rule in rules.values()} == {"ok"}


def test_the_stopped_instance_heads_the_top_k_table(prometheus: PrometheusServer) -> None:
    [(_, expression)] = [(t, e) for t, e in dashboard_queries() if t.startswith("Longest idle")]

    rows = wait_for("the top-k table", lambda: prometheus.query(expression), DATA_WAIT_SECONDS)

    assert {(row["metric"]["instance_id"], row["metric"]["state"]) for row in rows} == {
        ("9002", "stopped")
    }
