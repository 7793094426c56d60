"""A real Prometheus (Debian package) on 127.0.0.1 for tests, and the shipped dashboard's and
alert rules' expressions as plain PromQL.

``running_prometheus(target_port, workdir)`` starts ``prometheus`` scraping
``127.0.0.1:target_port`` every second with ``deploy/prometheus/alerts.yml`` loaded, waits until
the target is up, and stops it afterwards. Missing ``prometheus`` skips on a laptop and fails in
CI (:func:`tests.support.requirements.require_program`).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.requirements import require_program
from watchdog_gpu.clock import SystemClock

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "watchdog-gpu.json"
WAIT_SECONDS = 60.0
CLOCK = SystemClock()
# What the dashboard's Grafana macros and variables become in a plain Prometheus query.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "1h",
    "$account": ".*",
}
# A series selector inside an alert expression: a metric name and its optional label matchers.
_SELECTOR = re.compile(r"\b((?:watchdog_gpu_[a-z_]+|up)(?:\{[^}]*\})?)")


def wait_for(what: str, check: Callable[[], Any], seconds: float = WAIT_SECONDS) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``seconds``."""
    deadline = CLOCK.monotonic() + seconds
    last_error: Exception | None = None
    while CLOCK.monotonic() < deadline:
        try:
            result = check()
        except (httpx.HTTPError, ValueError, KeyError) as error:
            last_error, result = error, None
        if result:
            return result
        CLOCK.sleep(0.2)
    pytest.fail(f"timed out after {seconds:.0f}s waiting for {what} (last error: {last_error})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port: int = probe_socket.getsockname()[1]
        return port


@dataclass
class PrometheusServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.base_url}{path}", params=params, timeout=10)
        payload = response.json()
        assert payload["status"] == "success", (path, params, payload)
        return payload["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/api/v1/query", query=expression)["result"]
        return result

    def alert_rules(self) -> dict[str, dict[str, Any]]:
        """Every loaded alert rule by name (``query`` is its expression, ``health`` ok or err,
        ``lastEvaluation`` the zero time 0001-01-01 until it was evaluated)."""
        groups = self.get("/api/v1/rules")["groups"]
        return {rule["name"]: rule for group in groups for rule in group["rules"]}

    def alert_state(self, name: str) -> str | None:
        """``pending`` or ``firing`` while the alert matches, else None."""
        state = str(self.alert_rules()[name]["state"])
        return None if state == "inactive" else state


@contextmanager
def running_prometheus(target_port: int, workdir: Path) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``127.0.0.1:target_port`` every second, with the shipped alerts."""
    binary = require_program("prometheus", hint="Debian package prometheus")
    shutil.copy(ALERTS, workdir / "alerts.yml")
    (workdir / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n"
        "  - job_name: watchdog_gpu\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n",
        encoding="utf-8",
    )
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_for("Prometheus to be ready", lambda: _ready(server))
        wait_for("the watchdog_gpu target to be up", lambda: _target_up(server, target_port))
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _ready(server: PrometheusServer) -> bool:
    if server.process.poll() is not None:
        pytest.fail(f"prometheus exited: {server.log.read_text(errors='replace')[-2000:]}")
    return httpx.get(f"{server.base_url}/-/ready", timeout=5).status_code == 200


def _target_up(server: PrometheusServer, port: int) -> bool:
    targets = server.get("/api/v1/targets", state="active")["activeTargets"]
    return any(
        target["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics" and target["health"] == "up"
        for target in targets
    )


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))  # collapsed rows nest panels


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of the dashboard, Grafana macros replaced."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expression = target["expr"]
            for macro, replacement in GRAFANA_SUBSTITUTIONS.items():
                expression = expression.replace(macro, replacement)
            queries.append((panel["title"], expression))
    return queries


def alert_selectors(expression: str) -> list[str]:
    """Every series selector an alert expression reads (``metric{matchers}``), in order."""
    return list(dict.fromkeys(_SELECTOR.findall(expression)))
