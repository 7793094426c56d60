"""The shipped systemd units and Prometheus files pass their real tools (systemd-analyze,
promtool), the checks can fail, and the files agree with the code and the metric contract."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.http_receiver import HttpReceiver
from tests.support.requirements import require_program
from watchdog_gpu.cli import EXIT_USAGE
from watchdog_gpu.config import DEFAULT_METRICS_PORT

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_UNIT = ROOT / "systemd" / "watchdog-gpu.service"
USER_UNIT = ROOT / "systemd" / "watchdog-gpu-user.service"
SYSTEM_FAILED = ROOT / "systemd" / "watchdog-gpu-failed@.service"
USER_FAILED = ROOT / "systemd" / "watchdog-gpu-user-failed@.service"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DEPLOY_README = ROOT / "deploy" / "README.md"


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, timeout=120
    )


def copy_units(tmp_path: Path) -> Path:
    unit_dir = tmp_path / "systemd"
    unit_dir.mkdir()
    for unit in (SYSTEM_UNIT, USER_UNIT, SYSTEM_FAILED, USER_FAILED):
        shutil.copy(unit, unit_dir)
    return unit_dir


def directives(unit: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_the_units_verify_cleanly_and_the_system_unit_scores_at_most_2() -> None:
    require_program("systemd-analyze", hint="Debian package systemd")

    result = run(ROOT / "scripts" / "check-systemd")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   verify system unit: no output" in result.stdout
    assert "ok   verify user unit (--user): no output" in result.stdout
    match = re.search(
        r"Overall exposure level for watchdog-gpu\.service: (\d+\.\d+)", result.stdout
    )
    assert match is not None, result.stdout
    assert float(match.group(1)) <= 2.0


def test_check_systemd_fails_on_a_typo_the_tool_only_prints(tmp_path: Path) -> None:
    require_program("systemd-analyze", hint="Debian package systemd")
    unit_dir = copy_units(tmp_path)
    user_unit = unit_dir / USER_UNIT.name
    user_unit.write_text(user_unit.read_text().replace("WatchdogSec=", "WatchdogSecs="))

    result = run(ROOT / "scripts" / "check-systemd", unit_dir)

    assert result.returncode == 1
    assert "Unknown key 'WatchdogSecs'" in result.stdout


def test_check_systemd_fails_when_the_hardening_is_weakened(tmp_path: Path) -> None:
    require_program("systemd-analyze", hint="Debian package systemd")
    unit_dir = copy_units(tmp_path)
    system_unit = unit_dir / SYSTEM_UNIT.name
    dropped = (
        "DynamicUser=",
        "PrivateUsers=",
        "ProtectSystem=",
        "ProtectHome=",
        "SystemCallFilter=",
    )
    weakened = [
        line for line in system_unit.read_text().splitlines() if not line.startswith(dropped)
    ]
    system_unit.write_text("\n".join(weakened) + "\n")

    result = run(ROOT / "scripts" / "check-systemd", unit_dir)

    assert result.returncode == 1
    assert "FAIL security system unit" in result.stdout


def test_a_bad_config_exit_code_does_not_restart_loop() -> None:
    for unit in (SYSTEM_UNIT, USER_UNIT):
        values = directives(unit)
        assert values["RestartPreventExitStatus"] == [str(EXIT_USAGE)]
        assert values["Restart"] == ["on-failure"]
        assert values["Type"] == ["notify"]
        assert values["NotifyAccess"] == ["main"]
        assert values["WatchdogSec"]


def test_the_system_unit_runs_the_installed_daemon_with_its_configuration_directory() -> None:
    values = directives(SYSTEM_UNIT)

    assert values["ExecStart"] == [
        "/opt/watchdog-gpu/venv/bin/watchdog-gpu run --config "
        "${CONFIGURATION_DIRECTORY}/config.toml"
    ]
    assert values["DynamicUser"] == ["yes"]
    assert values["StateDirectory"] == ["watchdog-gpu"]
    assert values["ConfigurationDirectory"] == ["watchdog-gpu"]
    assert any(value.startswith("ssh_private_key:") for value in values["LoadCredential"])


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_every_hardening_line_says_why(unit: Path) -> None:
    lines = unit.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# ---- Hardening"))
    section = []
    for line in lines[start:]:
        if not line:
            break
        section.append(line)

    uncommented = [
        line
        for previous, line in itertools.pairwise(section)
        if not line.startswith("#") and not previous.startswith("#")
    ]
    assert len([line for line in section if not line.startswith("#")]) >= 15
    assert uncommented == []


@pytest.mark.prometheus
def test_the_prometheus_files_pass_promtool() -> None:
    require_program("promtool", hint="Debian package prometheus")

    result = run(ROOT / "scripts" / "check-prometheus")

    assert result.returncode == 0, result.stdout + result.stderr
    alerts = (PROMETHEUS_DIR / "alerts.yml").read_text()
    assert f"SUCCESS: {alerts.count('- alert: ')} rules found" in result.stdout
    assert "Unit Testing:  alerts_test.yml\n  SUCCESS" in result.stdout


@pytest.mark.prometheus
def test_check_prometheus_fails_when_an_alert_stops_matching_its_test(tmp_path: Path) -> None:
    require_program("promtool", hint="Debian package prometheus")
    copy = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS_DIR, copy)
    alerts = copy / "alerts.yml"
    alerts.write_text(alerts.read_text().replace("> 600", "> 6000"))

    result = run(ROOT / "scripts" / "check-prometheus", copy)

    assert result.returncode != 0
    assert "WatchdogGpuNotPolling" in result.stdout + result.stderr


def contract_metrics() -> set[str]:
    text = DEPLOY_README.read_text()
    section = text.split("## Metric names (the contract)", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(watchdog_gpu_[a-z_]+)` \|", section, flags=re.MULTILINE))


def test_the_alert_rules_use_only_metric_names_from_the_contract() -> None:
    contract = contract_metrics()
    named = re.findall(r"watchdog_gpu_[a-z_]+", (PROMETHEUS_DIR / "alerts.yml").read_text())
    # a histogram is read through its _sum/_count/_bucket series
    used = {re.sub(r"_seconds_(sum|count|bucket)$", "_seconds", name) for name in named}

    assert len(contract) == 23  # what idle instances bill, watchdog_gpu_idle_usd_per_hour, joined
    assert used - contract == set()
    assert {
        "watchdog_gpu_up",
        "watchdog_gpu_last_successful_poll_timestamp_seconds",
        "watchdog_gpu_unverified_kills",
        "watchdog_gpu_blind_instances",
        "watchdog_gpu_unwatched_usd_per_hour",
        "watchdog_gpu_notification_backlog",
        "watchdog_gpu_period_spend_usd",
        "watchdog_gpu_period_ceiling_usd",
        "watchdog_gpu_job_duration_seconds",
        "watchdog_gpu_job_interval_seconds",
        "watchdog_gpu_job_errors_total",
    } <= used


RUNBOOK_PREFIX = "file:///usr/share/doc/watchdog-gpu/deploy.md#"  # deploy/README.md, installed
# A duration spelled in an alert's text: it goes stale when the configuration or `for` changes.
HARD_CODED_DURATION = re.compile(r"\b(\d+\s*(seconds?|minutes?|hours?|days?|min|s|m|h)|an hour)\b")


def alert_rules() -> list[dict[str, str]]:
    """Each alert's name and its annotations (one double-quoted line each in alerts.yml)."""
    rules: list[dict[str, str]] = []
    for line in (PROMETHEUS_DIR / "alerts.yml").read_text().splitlines():
        if match := re.fullmatch(r"\s+- alert: (\w+)", line):
            rules.append({"alert": match.group(1)})
        elif match := re.fullmatch(r"\s+(summary|description|runbook_url): (\".*\")", line):
            rules[-1][match.group(1)] = json.loads(match.group(2))
    return rules


def test_every_alert_links_its_runbook_section_of_deploy_readme() -> None:
    headings = {
        line.lstrip("#").strip().lower()
        for line in DEPLOY_README.read_text().splitlines()
        if line.startswith("#### ")
    }
    rules = alert_rules()

    assert len(rules) == 13
    for rule in rules:
        url = rule["runbook_url"]
        assert url == RUNBOOK_PREFIX + rule["alert"].lower()
        assert url.removeprefix(RUNBOOK_PREFIX) in headings, rule["alert"]


def test_no_alert_text_hard_codes_a_duration() -> None:
    for rule in alert_rules():
        for key in ("summary", "description"):
            text = rule[key]
            assert not HARD_CODED_DURATION.search(text), (rule["alert"], text)


def test_prometheus_scrapes_the_default_metrics_port_on_loopback() -> None:
    config = (PROMETHEUS_DIR / "prometheus.yml").read_text()

    assert f'targets: ["127.0.0.1:{DEFAULT_METRICS_PORT}"]' in config
    assert "job_name: watchdog_gpu" in config
    assert 'job="watchdog_gpu"' in (PROMETHEUS_DIR / "alerts.yml").read_text()


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_when_systemd_gives_up_the_failure_notifier_is_started_and_docs_are_the_projects(
    unit: Path,
) -> None:
    values = directives(unit)

    assert values["OnFailure"] == ["watchdog-gpu-failed@%n.service"]
    documentation = " ".join(values["Documentation"]).split()
    assert documentation[0] == "file:/usr/share/doc/watchdog-gpu/deploy.md"
    assert not any(uri.startswith("man:systemd") for uri in documentation)


@pytest.mark.parametrize(
    "lines",
    [
        ["json://127.0.0.1:{port}/phone"],
        # deploy/README allows tag=URL lines; Apprise notifies only untagged URLs unless the
        # command names a tag, so without --tag the message was lost (exit 3).
        ["critical=json://127.0.0.1:{port}/phone"],
        ["warning,critical=json://127.0.0.1:{port}/phone", "json://127.0.0.1:{port}/log"],
        ["info=json://127.0.0.1:{port}/chat", "always=json://127.0.0.1:{port}/pager"],
    ],
    ids=["untagged", "tagged", "mixed", "other-tags"],
)
@pytest.mark.parametrize(
    ("unit", "credentials"),
    [
        (SYSTEM_FAILED, "${CREDENTIALS_DIRECTORY}"),
        (USER_FAILED, "%h/.config/watchdog-gpu/credentials"),
    ],
    ids=["system", "user"],
)
def test_the_failure_notifier_delivers_one_critical_message_to_every_service_of_the_file(
    unit: Path, credentials: str, lines: list[str], tmp_path: Path
) -> None:
    """The notifier's ExecStart= as systemd would run it (specifiers and the credentials
    directory filled in, the real apprise command of this environment) against a receiver on
    loopback, whatever the services of the notify_url file are tagged with."""
    apprise = Path(sys.executable).parent / "apprise"
    command = directives(unit)["ExecStart"][0]
    binary, _, arguments = command.partition(" ")
    assert binary.endswith("/apprise")
    with HttpReceiver() as receiver:
        urls = [line.format(port=receiver.port) for line in lines]
        (tmp_path / "notify_url").write_text("".join(f"{url}\n" for url in urls))
        arguments = (
            arguments.replace(credentials, str(tmp_path))
            .replace("%i", "watchdog-gpu.service")
            .replace("%H", "gpu-box")
        )
        result = run(apprise, *shlex.split(arguments))
        requests = list(receiver.requests)

    assert result.returncode == 0, result.stdout + result.stderr
    paths = sorted(request.path for request in requests)
    assert paths == sorted("/" + url.rsplit("/", 1)[1] for url in urls)
    for request in requests:
        payload = json.loads(request.body)
        assert payload["type"] == "failure"
        assert payload["title"] == "watchdog-gpu is down: watchdog-gpu.service failed"
        assert "No GPU instance is watched" in payload["message"]
        assert "gpu-box" in payload["message"]
