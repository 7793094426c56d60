"""``watchdog-gpu doctor`` against the simulated providers served on loopback (real HTTP, the
world ``sim serve`` runs) with the simulator's SSH runner: a correct report, and nothing but
listing requests in the simulator's request log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli_support import Result, isolate, run
from tests.support.sim_world import SCENARIOS, ServedWorld, served_world
from watchdog_gpu.commands import common, doctor
from watchdog_gpu.sim.ssh import SimulatedSshRunner
from watchdog_gpu.store.lock import database_lock

# 1h30m into three_providers.toml: vast-a/9003 (a bid instance) was outbid at 1h.
INTO_THE_NIGHT = timedelta(hours=1, minutes=30)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ServedWorld]:
    isolate(monkeypatch, tmp_path)
    with served_world() as world:
        world.clock.advance(INTO_THE_NIGHT)
        monkeypatch.setattr(common, "clock", world.clock)
        monkeypatch.setattr(doctor, "ssh_runner", SimulatedSshRunner(world.world))
        yield world


def write_config(
    served: ServedWorld,
    tmp_path: Path,
    *,
    mode: str = "monitor",
    keys: dict[str, str] | None = None,
) -> Path:
    body = f'[watchdog]\nmode = "{mode}"\ndatabase_url = "sqlite:///{tmp_path / "wd.db"}"\n'
    for account in served.scenario.accounts:
        key = (keys or {}).get(account.name, account.effective_api_key)
        body += (
            f'\n[[accounts]]\nname = "{account.name}"\nprovider = "{account.provider}"\n'
            f'api_key = "{key}"\napi_url = "{served.url(account.provider)}"\nretry_budget = "1s"\n'
        )
    config = tmp_path / "watchdog-gpu.toml"
    config.write_text(body, encoding="utf-8")
    return config


def doctor_json(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[Result, Any]:
    result = run(capsys, "doctor", "--config", str(config), "--json")
    return result, json.loads(result.out)


def by_name(items: list[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    matches = [item for item in items if item[key] == value]
    assert len(matches) == 1, (value, [item[key] for item in items])
    return matches[0]


def test_the_report_shows_states_rates_probes_unknowns_and_what_the_rules_would_do(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, report = doctor_json(capsys, write_config(served, tmp_path))

    assert result.code == 0, result.err
    assert report["healthy"] is True
    assert report["mode"] == "monitor"
    accounts = report["accounts"]
    assert [a["name"] for a in accounts] == ["vast-a", "vast-b", "runpod-a", "lambda-a"]
    assert all(a["key"]["status"] == "accepted" for a in accounts)

    vast = by_name(accounts, "name", "vast-a")
    assert vast["balance_usd"] is not None
    assert vast["balance_usd"] < 50.0
    assert "Vast keys can be scoped" in vast["key"]["scopes"]
    busy = by_name(vast["instances"], "instance_id", "9001")
    assert (busy["state"], busy["interruptible"], busy["compute_usd_per_hour"]) == (
        "running",
        False,
        0.62,
    )
    # 100 GB at $0.15/GB-month (a month of 720-730 h, whichever the provider bills on)
    assert busy["storage_usd_per_hour"] == pytest.approx(100 * 0.15 / 725, rel=0.01)
    assert busy["billed_usd_per_hour"] == pytest.approx(0.62 + busy["storage_usd_per_hour"])
    assert busy["ssh_endpoint"].startswith("root@127.0.0.1:")
    assert busy["probe"]["status"] == "ok"
    assert busy["probe"]["verdict"] == "busy"
    assert busy["probe"]["peak_util_percent"] == [97, 91]
    idle = by_name(vast["instances"], "instance_id", "9002")
    assert (idle["probe"]["verdict"], idle["probe"]["peak_util_percent"]) == ("idle", [0])
    outbid = by_name(vast["instances"], "instance_id", "9003")
    assert (outbid["state"], outbid["interruptible"], outbid["probe"]) == ("paused", True, None)
    assert outbid["not_probed"] == "not running (paused)"
    assert outbid["billed_usd_per_hour"] == outbid["storage_usd_per_hour"]  # the disk only
    stopped = by_name(vast["instances"], "instance_id", "9004")
    assert stopped["state"] == "stopped"
    assert stopped["billed_usd_per_hour"] == pytest.approx(200 * 0.20 / 725, rel=0.01)
    assert [v["volume_id"] for v in vast["volumes"]] == ["20118481"]

    runpod = by_name(accounts, "name", "runpod-a")
    assert runpod["spend_limit_usd_per_hour"] == 40
    starting = by_name(runpod["instances"], "instance_id", "z1x2c3v4b5n6m7")
    assert starting["state"] == "starting"
    assert "SSH endpoint" in starting["unknown"]  # no port published until the runtime is up
    lambda_ = by_name(accounts, "name", "lambda-a")
    # Lambda is postpaid: no balance, said as such (not $0, not an unreadable field)
    assert lambda_["balance_usd"] is None
    assert "balance" not in lambda_["unknown"]
    assert "balance: none (postpaid, so no balance floor)" in lambda_["capabilities"]
    assert (
        "stop: no, instances can only be terminated (a stop rule is rejected)"
        in (lambda_["capabilities"])
    )
    assert (
        "balance: documented as spendable for every key (a balance floor may act)"
        in (runpod["capabilities"])
    )
    assert "cannot be scoped" in lambda_["key"]["scopes"]

    now = served.clock.now()
    verdicts = {(v["rule"], v["subject"]): v for v in report["verdicts"]}
    paused = verdicts[("paused_interruptible", "vast-a/9003")]
    assert (paused["action"], paused["status"], paused["dry_run"]) == ("destroy", "wait", True)
    assert paused["due_at"] == (now + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    assert verdicts[("stopped_disk", "vast-a/9004")]["action"] == "destroy"
    assert verdicts[("low_balance", "vast-b")]["status"] == "notify"
    # A busy instance is never a subject of a destructive rule.
    assert not [v for v in report["verdicts"] if v["subject"] == "vast-a/9001"]


def test_the_text_report_names_each_account_instance_and_verdict(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "doctor", "--config", str(write_config(served, tmp_path)))

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "account vast-a (vast)" in lines
    assert "  key: accepted — the instance listing works with this key" in lines
    # The raw state may hold spaces ("scheduling (intended running, bid < min_bid)").
    raw = "scheduling (intended running, bid < min_bid)"
    line = next(line for line in lines if line.strip().startswith("9003 "))
    row = line.replace(raw, "RAW").split()
    assert row[:8] == ["9003", "sweep-bid", "paused", "RAW", "yes", "$0.220/h", row[6], row[6]]
    assert any(
        line.startswith("  wait: destroy (dry run) vast-a/9003 (paused_interruptible) due ")
        and "(in 30 min)" in line
        for line in lines
    )
    # lambda-a, postpaid: its API reports none of the account facts; not a read failure
    assert "    account: spend $/h, spend limit, auto-pay" not in lines
    assert "  not offered by the provider's API: balance, spend $/h, spend limit, auto-pay" in lines
    assert lines[-1] == "result: every account was read and every probe read its GPUs"


def test_doctor_sends_only_listing_requests_and_never_touches_the_database(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # enforce: the rules would act, so a slip would show as a mutation in the log
    served.clock.advance(timedelta(hours=2))
    config = write_config(served, tmp_path, mode="enforce")

    result, report = doctor_json(capsys, config)

    assert result.code == 0, result.err
    assert any(not v["dry_run"] and v["action"] == "destroy" for v in report["verdicts"])
    requests = [
        r for provider in ("vast", "runpod", "lambda") for r in served.servers.requests(provider)
    ]
    assert {r.method for r in requests} <= {"GET", "POST"}
    posts = [r for r in requests if r.method == "POST"]
    assert posts
    assert all(r.path.endswith("/graphql") for r in posts)
    assert {r.operation for r in posts} == {"query"}
    assert [a for a in served.world.actions() if a.source == "api"] == []
    assert not (tmp_path / "wd.db").exists()


def test_a_rejected_key_is_reported_and_the_other_accounts_still_read(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(served, tmp_path, keys={"vast-b": "not-the-key"})

    result, report = doctor_json(capsys, config)

    assert result.code == 1
    assert report["healthy"] is False
    rejected = by_name(report["accounts"], "name", "vast-b")
    assert rejected["key"]["status"] == "rejected"
    assert rejected["instances"] == []
    assert "not-the-key" not in result.out + result.err
    assert by_name(report["accounts"], "name", "vast-a")["key"]["status"] == "accepted"


def test_doctor_runs_beside_a_daemon_holding_the_database(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(served, tmp_path)
    lock = database_lock(f"sqlite:///{tmp_path / 'wd.db'}", role="run")
    lock.acquire()
    try:
        result = run(capsys, "doctor", "--config", str(config))
    finally:
        lock.release()

    assert result.code == 0, result.err


def test_missing_secrets_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    isolate(monkeypatch, tmp_path)
    config = tmp_path / "watchdog-gpu.toml"
    config.write_text(
        '[[accounts]]\nname = "vast-main"\nprovider = "vast"\n'
        'api_key = { env = "WD_TEST_UNSET_KEY" }\n',
        encoding="utf-8",
    )

    result = run(capsys, "doctor", "--config", str(config))

    assert result.code == 2
    assert "accounts[0].api_key" in result.err


@contextmanager
def sim_serve(*arguments: str) -> Iterator[dict[str, str]]:
    """``watchdog-gpu sim serve`` as a process; its URLs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", "sim", "serve", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert line, "sim serve printed no URLs"
        yield json.loads(line)
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()


@pytest.mark.slow
def test_doctor_as_a_user_runs_it_against_sim_serve(tmp_path: Path) -> None:
    """Both as real processes: ``sim serve`` on loopback and ``doctor --json`` pointed at it."""
    scenario = SCENARIOS / "three_providers.toml"
    with sim_serve("--scenario", str(scenario)) as urls:
        body = '[watchdog]\nmode = "monitor"\n[probe]\nenabled = false\n'
        for name, provider in (("vast-a", "vast"), ("runpod-a", "runpod")):
            body += (
                f'[[accounts]]\nname = "{name}"\nprovider = "{provider}"\n'
                f'api_key = "sim-{name}"\napi_url = "{urls[provider]}"\n'
            )
        config = tmp_path / "watchdog-gpu.toml"
        config.write_text(body, encoding="utf-8")
        environ = {
            key: value for key, value in os.environ.items() if not key.startswith("WATCHDOG_GPU_")
        }
        environ["HOME"] = str(tmp_path / "home")
        finished = subprocess.run(
            [sys.executable, "-m", "watchdog_gpu", "doctor", "--config", str(config), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=environ,
            cwd=tmp_path,
        )

    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    vast = by_name(report["accounts"], "name", "vast-a")
    states = {i["instance_id"]: (i["state"], i["interruptible"]) for i in vast["instances"]}
    assert states == {
        "9001": ("running", False),
        "9002": ("running", False),
        "9003": ("running", True),
        "9004": ("stopped", False),
    }
    assert by_name(vast["instances"], "instance_id", "9001")["not_probed"] == (
        "probe disabled ([probe] enabled = false)"
    )
    runpod = by_name(report["accounts"], "name", "runpod-a")
    # A RunPod spot pod off its GPU: paused or stopped (RunPod does not tell an interruption
    # from a user's stop; docs/providers.md); either way only its disk bills, and a rule
    # plans its destroy.
    spot = by_name(runpod["instances"], "instance_id", "w3e4r5t6y7u8io")
    assert spot["state"] in ("paused", "stopped")
    assert spot["interruptible"] is True
    assert spot["billed_usd_per_hour"] == spot["storage_usd_per_hour"]
    verdicts = {(v["rule"], v["subject"]): v for v in report["verdicts"]}
    assert [v["action"] for (_, subject), v in verdicts.items() if "w3e4" in subject] == ["destroy"]
    assert ("stopped_disk", "vast-a/9004") in verdicts
    assert not (tmp_path / "watchdog-gpu.db").exists()


def test_the_report_says_what_each_accounts_gpu_evidence_proves_as_config_check_does(
    served: ServedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(served, tmp_path)
    result, report = doctor_json(capsys, config)
    check = json.loads(run(capsys, "config", "check", "--config", str(config), "--json").out)

    assert result.code == 0, result.err
    said = {a["name"]: a["gpu_evidence"] for a in check["accounts"]}
    assert {a["name"]: a["gpu_evidence"] for a in report["accounts"]} == said
    # No SSH key in this configuration: RunPod's figure proves busy only.
    assert said["runpod-a"].startswith("no SSH probe: only RunPod's per-poll utilisation figure")
    text = run(capsys, "doctor", "--config", str(config)).out
    assert f"  GPU evidence: {said['runpod-a']}" in text
