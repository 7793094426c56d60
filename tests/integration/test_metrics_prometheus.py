"""The exporter against the real tools: its scrape passes ``promtool check metrics``, a real
Prometheus (Debian package) scrapes it on 127.0.0.1, answers queries about it, evaluates the
shipped alert rules against it, and runs every query of the Grafana dashboard with data."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.store_builders import (
    ACCOUNT,
    PROVIDER,
    T0,
    instance,
    minutes,
    observation,
    probe,
    sample,
)
from tests.support.requirements import require_program
from watchdog_gpu.clock import SystemClock, VirtualClock
from watchdog_gpu.executor import ExecutorReport
from watchdog_gpu.metrics import Metrics, MetricsConfig, new_registry, serve_metrics, stop_metrics
from watchdog_gpu.model import InstanceState, ProbeOutcome, ProbeStatus
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "watchdog-gpu.json"
NOW = T0 + minutes(60)
WAIT_SECONDS = 60.0
CLOCK = SystemClock()
# What the dashboard's Grafana macros and variables become in a plain Prometheus query.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "1h",
    "$account": ".*",
}


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``WAIT_SECONDS``."""
    deadline = CLOCK.monotonic() + WAIT_SECONDS
    last_error: Exception | None = None
    while CLOCK.monotonic() < deadline:
        try:
            result = check()
        except (httpx.HTTPError, ValueError, KeyError) as error:
            last_error, result = error, None
        if result:
            return result
        CLOCK.sleep(0.2)
    pytest.fail(
        f"timed out after {WAIT_SECONDS:.0f}s waiting for {what} (last error: {last_error})"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port: int = probe_socket.getsockname()[1]
        return port


def record_fleet(store: Store) -> None:
    """101 running and busy, 102 paused at minute 20, 103 running and never probed (blind)."""
    for minute in range(0, 61, 10):
        moment = T0 + minutes(minute)
        paused = InstanceState.PAUSED if minute >= 20 else InstanceState.RUNNING
        store.record_observation(
            observation(
                instance("101", at=moment),
                instance("102", paused, at=moment),
                instance("103", at=moment),
                at=moment,
            ),
            moment,
        )
    for minute in range(50, 61, 2):
        moment = T0 + minutes(minute)
        store.record_probe(probe("101", moment, sample("101", moment, 0, 90.0)))


def record_events(metrics: Metrics) -> None:
    metrics.record_poll(ACCOUNT, PROVIDER, "ok")
    metrics.record_poll(ACCOUNT, PROVIDER, "transient")
    metrics.record_probes(
        [
            ProbeOutcome(ACCOUNT, "101", NOW, ProbeStatus.OK, 1.2),
            ProbeOutcome(ACCOUNT, "103", NOW, ProbeStatus.UNREACHABLE, 10.0),
        ]
    )
    metrics.record_executor(
        ExecutorReport((("idle_gpu:vast-main/99:2026:destroy", "idle_gpu", "verified"),))
    )
    metrics.record_job("poll:vast-main", 0.4)
    metrics.record_job("evaluate", 0.2)


@dataclass
class Exporter:
    port: int
    metrics: Metrics

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    engine = create_engine_for(sqlite_url(tmp_path_factory.mktemp("store") / "watchdog-gpu.db"))
    upgrade_to_head(engine)
    store = Store(engine)
    record_fleet(store)
    registry = new_registry()
    config = MetricsConfig(
        accounts={ACCOUNT: PROVIDER},
        budget=BudgetConfig(daily_usd=1.0),
        job_intervals={"poll": minutes(1), "evaluate": minutes(1), "probe": minutes(1)},
    )
    metrics = Metrics(registry, config, store=store, clock=VirtualClock(NOW))
    record_events(metrics)
    server, thread = serve_metrics("127.0.0.1", 0, registry)
    try:
        yield Exporter(server.server_port, metrics)
    finally:
        stop_metrics(server, thread)
        engine.dispose()


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


@pytest.fixture(scope="module")
def prometheus(
    exporter: Exporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    binary = require_program("prometheus", hint="Debian package prometheus")
    workdir = tmp_path_factory.mktemp("prometheus")
    shutil.copy(ALERTS, workdir / "alerts.yml")
    (workdir / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n"
        "  - job_name: watchdog_gpu\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n",
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
        wait_for("the watchdog_gpu target to be up", lambda: _target_up(server, exporter.port))
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


# -- promtool ---------------------------------------------------------------------------------


def check_metrics(promtool: str, exposition: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_live_scrape_passes_promtool_check_metrics(exporter: Exporter) -> None:
    promtool = require_program("promtool", hint="Debian package prometheus")
    body = httpx.get(exporter.url, timeout=10).text

    result = check_metrics(promtool, body)

    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert "watchdog_gpu_instance_state_seconds{" in body  # the lint saw the store-backed gauges
    assert "_created" not in body


def test_promtool_would_notice_a_badly_named_metric(exporter: Exporter) -> None:
    promtool = require_program("promtool", hint="Debian package prometheus")
    body = httpx.get(exporter.url, timeout=10).text
    broken = body.replace("watchdog_gpu_probe_duration_seconds", "watchdog_gpu_probe_duration_ms")

    result = check_metrics(promtool, broken)

    assert result.returncode != 0


# -- a real Prometheus ------------------------------------------------------------------------


def test_prometheus_scrapes_the_exporter_and_answers_queries_about_the_fleet(
    prometheus: PrometheusServer,
) -> None:
    up = wait_for("watchdog_gpu_up", lambda: prometheus.query("watchdog_gpu_up"))
    running = prometheus.query(f'watchdog_gpu_instances{{account="{ACCOUNT}",state="running"}}')
    spend = prometheus.query('watchdog_gpu_period_spend_usd{scope="global",period="day"}')

    assert [series["value"][1] for series in up] == ["1"]
    assert up[0]["metric"]["job"] == "watchdog_gpu"
    assert [series["value"][1] for series in running] == ["2"]
    assert float(spend[0]["value"][1]) > 0


def test_the_shipped_alert_rules_evaluate_against_the_live_metrics(
    prometheus: PrometheusServer,
) -> None:
    def evaluated() -> list[dict[str, Any]] | None:
        groups = prometheus.get("/api/v1/rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        # A rule never evaluated reports the zero time 0001-01-01.
        if rules and not any(rule["lastEvaluation"].startswith("0001") for rule in rules):
            return rules
        return None

    rules = wait_for("every alert rule to be evaluated", evaluated)
    by_name = {rule["name"]: rule for rule in rules}

    assert len(by_name) == ALERTS.read_text().count("- alert: ") >= 11
    assert {rule["health"] for rule in rules} == {"ok"}
    # 103 has never been probed: the blind-instances alert matches real series (pending: for 30m)
    assert wait_for(
        "WatchdogGpuBlindInstances to match",
        lambda: _alert_state(prometheus, "WatchdogGpuBlindInstances"),
    ) in {"pending", "firing"}


def _alert_state(prometheus: PrometheusServer, name: str) -> str | None:
    groups = prometheus.get("/api/v1/rules")["groups"]
    for group in groups:
        for rule in group["rules"]:
            if rule["name"] == name and rule["state"] != "inactive":
                return str(rule["state"])
    return None


# -- the Grafana dashboard --------------------------------------------------------------------


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))  # collapsed rows nest panels


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expression = target["expr"]
            for macro, replacement in GRAFANA_SUBSTITUTIONS.items():
                expression = expression.replace(macro, replacement)
            queries.append((panel["title"], expression))
    return queries


def test_the_dashboard_has_queries_and_every_one_is_plain_promql_after_substitution() -> None:
    queries = dashboard_queries()

    assert len(queries) >= 10
    assert all("$" not in expression for _, expression in queries)
    used = set(re.findall(r"watchdog_gpu_[a-z_]+", " ".join(e for _, e in queries)))
    assert "watchdog_gpu_actions_total" in used


@pytest.mark.parametrize(("title", "expression"), dashboard_queries())
def test_every_dashboard_query_runs_on_prometheus_and_shows_data(
    prometheus: PrometheusServer, title: str, expression: str
) -> None:
    # rate()/increase() need two scrapes inside their window: wait for data, boundedly.
    result = wait_for(f"data for panel {title!r}", lambda: prometheus.query(expression))

    assert result, title


def test_the_dashboard_asks_for_its_data_source_and_marks_thresholds() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = list(dashboard_panels(dashboard["panels"]))

    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    sources = [panel["datasource"] for panel in panels]
    sources += [target["datasource"] for panel in panels for target in panel["targets"]]
    assert {source["uid"] for source in sources} == {"${DS_PROMETHEUS}"}
    for panel in panels:
        if panel["type"] in {"stat", "gauge", "bargauge"}:
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            assert len(steps) >= 2, panel["title"]
        if panel["type"] == "table":  # a top-k of now, not a top-k per moment of the range
            assert all(t["instant"] and not t["range"] for t in panel["targets"]), panel["title"]


ACCOUNT_METRICS = (
    "watchdog_gpu_actions_total",
    "watchdog_gpu_ssh_errors_total",
    "watchdog_gpu_provider_errors_total",
    "watchdog_gpu_instances",
    "watchdog_gpu_spend_rate_usd_per_hour",
    "watchdog_gpu_balance_usd",
    "watchdog_gpu_instance_state_seconds",
    "watchdog_gpu_last_successful_poll_timestamp_seconds",
)


def test_every_query_of_a_metric_with_an_account_label_honours_the_account_variable() -> None:
    for title, expression in dashboard_queries():
        for metric in ACCOUNT_METRICS:
            for match in re.finditer(rf"{metric}(\{{[^}}]*\}})?", expression):
                assert 'account=~".*"' in (match.group(1) or ""), (title, expression)


def test_the_dashboard_account_variable_lists_the_accounts(prometheus: PrometheusServer) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "account")
    match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
    assert match is not None
    metric, label = match.groups()

    values = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric})

    assert values == [ACCOUNT]
