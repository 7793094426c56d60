"""``watchdog-gpu config check``: a summary and exit 0, or every problem and exit 2."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from watchdog_gpu.cli import EXIT_USAGE, main

FIXTURES = Path(__file__).parent.parent / "fixtures" / "config"
EXAMPLE = Path(__file__).parent.parent.parent / "config.example.toml"
CANARY = "canary-secret-7f3a9"


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No keys, no credentials, no overrides from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_") or name in {
            "VAST_API_KEY",
            "CREDENTIALS_DIRECTORY",
            "STATE_DIRECTORY",
            "XDG_STATE_HOME",
            "XDG_CONFIG_HOME",
            "WATCHDOG_NOTIFY_URL",
        }:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_the_example_checks_out_without_any_api_key_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # any directory: the path given is absolute

    code = main(["config", "check", "--config", str(EXAMPLE)])

    out = capsys.readouterr().out
    assert code == 0
    assert f"config file: {EXAMPLE.absolute()} (--config)" in out
    assert "mode: monitor" in out
    assert "vast-main   vast    api_key: credential vast_api_key (missing:" in out
    assert "runpod-lab  runpod  api_key: file " in out
    assert "credentials/runpod_api_key (missing)" in out
    assert "idle_gpu              destroy  monitor" in out
    assert "low_balance           notify   monitor" in out
    assert "notify: 1 route" in out
    assert "spend digest: off" in out
    assert "refuses to start" in out


def test_three_mistakes_give_three_dotted_paths_and_exit_2_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["config", "check", "--config", str(FIXTURES / "three_mistakes.toml")])

    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "invalid configuration (3 problems):" in captured.err
    for path in (
        "accounts[1].api_key:",
        "rules.idle_gpu.idle_minuts:",
        "rules.stopped_disk.after:",
    ):
        assert f"\n  {path}" in captured.err
    assert "Traceback" not in captured.err


def test_a_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["config", "check", "--config", str(tmp_path / "absent.toml")])

    assert code == 2
    assert "absent.toml does not exist" in capsys.readouterr().err


def test_the_file_is_found_through_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATCHDOG_GPU_CONFIG", str(FIXTURES / "minimal.toml"))
    monkeypatch.setenv("VAST_API_KEY", CANARY)

    code = main(["config", "check"])

    out = capsys.readouterr().out
    assert code == 0
    assert "($WATCHDOG_GPU_CONFIG)" in out
    assert "api_key: env VAST_API_KEY (set)" in out
    assert out.rstrip().endswith("configuration is valid")


@pytest.mark.parametrize("kind", ["env", "file", "credential"])
def test_a_secret_value_appears_nowhere_in_the_output(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    (tmp_path / "key").write_text(CANARY + "\n")
    # A real private key (config check loads it as run does), itself a secret too.
    ssh_key = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )
    (tmp_path / "ssh_key").write_text(ssh_key)
    monkeypatch.setenv("VAST_API_KEY", CANARY)
    monkeypatch.setenv("SSH_KEY", ssh_key)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("NTFY_URL", f"ntfys://ntfy.sh/{CANARY}")
    reference, key_reference = {
        "env": ('{ env = "VAST_API_KEY" }', '{ env = "SSH_KEY" }'),
        "file": (
            f'{{ file = "{tmp_path / "key"}" }}',
            f'{{ file = "{tmp_path / "ssh_key"}" }}',
        ),
        "credential": ('{ credential = "key" }', '{ credential = "ssh_key" }'),
    }[kind]
    config = tmp_path / "config.toml"
    config.write_text(
        textwrap.dedent(f"""
        [[accounts]]
        name = "vast-main"
        provider = "vast"
        api_key = {reference}
        [accounts.ssh]
        private_key = {key_reference}
        [[notify.routes]]
        url = {{ env = "NTFY_URL" }}
        """)
    )

    code = main(["config", "check", "--config", str(config)])

    captured = capsys.readouterr()
    assert code == 0
    assert f"api_key: {kind} " in captured.out
    assert "(set)" in captured.out
    assert "notify.routes[0].url:" in captured.out
    assert CANARY not in captured.out + captured.err
    assert "PRIVATE KEY" not in captured.out + captured.err


def test_plain_text_secrets_are_accepted_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[accounts]]\nname = "a"\nprovider = "lambda"\napi_key = "{CANARY}"\n'
        "[accounts.ssh]\nuse_agent = true\n"
    )

    code = main(["config", "check", "--config", str(config)])

    captured = capsys.readouterr()
    assert code == 0
    assert "warning: accounts[0].api_key: stored in plain text" in captured.err
    assert "api_key: plain text in the config file (set)" in captured.out
    assert CANARY not in captured.out + captured.err


def test_config_without_an_action_prints_usage_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["config"])

    assert caught.value.code == 2
    assert "check" in capsys.readouterr().err


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


ONE_ACCOUNT = """
    [[accounts]]
    name = "vast-main"
    provider = "vast"
    api_key = { env = "VAST_API_KEY" }
"""


def test_no_accounts_is_valid_but_says_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["config", "check", "--config", str(write(tmp_path, "[watchdog]\n"))])

    captured = capsys.readouterr()
    assert code == 0
    assert "accounts: no [[accounts]] configured: the daemon would watch nothing" in captured.err
    assert captured.out.rstrip().endswith(
        "configuration is valid, but `watchdog-gpu run` refuses to start: "
        "no [[accounts]] configured (it would watch nothing)"
    )


def test_deprecated_numeric_durations_work_and_are_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        ONE_ACCOUNT
        + """
        [rules.idle_gpu]
        idle_minutes = 45
        [rules.low_balance]
        min_runway_hours = 2.5
        [probe]
        sample_interval_seconds = 2
        """,
    )

    code = main(["config", "check", "--config", str(config)])

    err = capsys.readouterr().err
    assert code == 0
    assert 'rules.idle_gpu.idle_minutes: deprecated: write idle = "45m"' in err
    assert 'rules.low_balance.min_runway_hours: deprecated: write min_runway = "2h30m"' in err
    assert 'probe.sample_interval_seconds: deprecated: write sample_interval = "2s"' in err


def test_old_and_new_duration_key_together_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, ONE_ACCOUNT + '[rules.idle_gpu]\nidle_minutes = 45\nidle = "1h"\n')

    code = main(["config", "check", "--config", str(config)])

    err = capsys.readouterr().err
    assert code == 2
    assert "rules.idle_gpu" in err
    assert "idle_minutes and idle are both set" in err


def test_values_from_the_environment_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATCHDOG_GPU_WATCHDOG__MODE", "enforce")
    monkeypatch.setenv("WATCHDOG_GPU_RULES__IDLE_GPU__IDLE", "45m")
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    config = write(tmp_path, ONE_ACCOUNT)

    code = main(["config", "check", "--config", str(config)])

    out = capsys.readouterr().out
    assert code == 0
    assert "mode: enforce" in out
    section = out.split("from the environment (these win over the file):\n", 1)[1]
    assert "watchdog.mode:" in section
    assert "$WATCHDOG_GPU_WATCHDOG__MODE" in section
    assert "rules.idle_gpu.idle:" in section
    assert "$WATCHDOG_GPU_RULES__IDLE_GPU__IDLE" in section
    assert "$STATE_DIRECTORY" in section


def test_json_of_a_valid_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATCHDOG_GPU_WATCHDOG__MODE", "enforce")
    monkeypatch.setenv("VAST_API_KEY", CANARY)
    config = write(
        tmp_path,
        ONE_ACCOUNT
        + "[rules.idle_gpu]\nidle_minutes = 45\n"
        + '[notify.digest]\nevery = "weekly"\nweekday = "friday"\ntimezone = "Europe/Berlin"\n',
    )

    code = main(["config", "check", "--config", str(config), "--json"])

    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0
    assert captured.err == ""
    assert CANARY not in captured.out
    assert report["valid"] is True
    assert report["ready_to_run"] is True
    assert report["mode"] == "enforce"
    assert report["accounts"] == [
        {
            "name": "vast-main",
            "provider": "vast",
            "api_key": "env VAST_API_KEY (set)",
            "protected": False,
            "gpu_evidence": (
                "no SSH probe and no utilisation from the API: its instances stay unobserved "
                "(never judged idle; budget and time limits still act)"
            ),
        }
    ]
    assert {"path": "watchdog.mode", "variable": "WATCHDOG_GPU_WATCHDOG__MODE"} in report[
        "from_environment"
    ]
    assert {"path", "message"} <= set(report["warnings"][0])
    assert any(w["path"] == "rules.idle_gpu.idle_minutes" for w in report["warnings"])
    # In the registry's order (the money layer first), as the rules are evaluated.
    assert [rule["name"] for rule in report["rules"]][:2] == ["budget", "idle_gpu"]
    assert report["notify_digest"] == "weekly on friday at 08:00 Europe/Berlin (info)"


def test_json_of_an_invalid_configuration_lists_the_problems_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["config", "check", "--config", str(FIXTURES / "three_mistakes.toml"), "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 2
    assert report["valid"] is False
    assert len(report["problems"]) == 3
    assert all(problem["path"] for problem in report["problems"])


def test_json_without_accounts_is_not_ready_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["config", "check", "--config", str(write(tmp_path, "")), "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["ready_to_run"] is False
    assert report["refusals"][0]["path"] == "accounts"


def test_an_apprise_config_file_counts_as_somewhere_to_notify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apprise_file = tmp_path / "apprise.yml"
    apprise_file.write_text("version: 1\nurls:\n  - json://127.0.0.1:9/x:\n      tag: always\n")
    apprise_file.chmod(0o600)
    config = tmp_path / "config.toml"
    config.write_text(
        '[[accounts]]\nname = "a"\nprovider = "vast"\napi_key = { env = "K" }\n'
        '[notify]\nconfig = "apprise.yml"\n',
        encoding="utf-8",
    )

    main(["config", "check", "--config", str(config)])
    text = capsys.readouterr().out
    main(["config", "check", "--config", str(config), "--json"])
    document = json.loads(capsys.readouterr().out)

    assert "notify: 0 routes and an Apprise config file (notify.config)" in text
    assert "no routes" not in text  # not warned about: the file is somewhere to notify
    assert document["notify_config"] == f"file {apprise_file} (set)"


def test_stop_on_a_provider_that_cannot_stop_is_rejected_with_its_dotted_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        """
        [[accounts]]
        name = "lambda-lab"
        provider = "lambda"
        api_key = { env = "LAMBDA_API_KEY" }

        [rules.idle_gpu]
        action = "stop"

        [rules.max_runtime]
        enabled = false
        action = "stop"
        """,
    )

    code = main(["config", "check", "--config", str(config)])

    captured = capsys.readouterr()
    assert code == 2
    assert "invalid configuration (1 problem):" in captured.err
    assert '\n  rules.idle_gpu.action: "stop" is not possible on Lambda' in captured.err
    assert "'lambda-lab'" in captured.err
    assert "rules.max_runtime" not in captured.err  # a disabled rule cannot fail to stop


def test_stop_is_accepted_when_every_provider_can_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, ONE_ACCOUNT + '\n    [rules.idle_gpu]\n    action = "stop"\n')

    assert main(["config", "check", "--config", str(config)]) == 0
    assert "idle_gpu              stop" in capsys.readouterr().out


@pytest.mark.parametrize(
    "key",
    [
        "not a key at all",
        "-----BEGIN OPENSSH PRIVATE KEY-----\\nAAAA\\n-----END OPENSSH PRIVATE KEY-----",
    ],
    ids=["garbage", "damaged"],
)
def test_config_check_refuses_an_inline_ssh_key_that_run_refuses_naming_the_account(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        textwrap.dedent(f"""
        [[accounts]]
        name = "lambda-a"
        provider = "lambda"
        api_key = "{CANARY}"

        [[accounts]]
        name = "vast-main"
        provider = "vast"
        api_key = "{CANARY}"
        [accounts.ssh]
        private_key = "{key}"
        """)
    )

    check = main(["config", "check", "--config", str(config)])
    checked = capsys.readouterr()
    once = main(["once", "--config", str(config)])
    ran = capsys.readouterr()

    assert (check, once) == (EXIT_USAGE, EXIT_USAGE)
    [problem] = [line for line in checked.err.splitlines() if ".ssh." in line]
    assert problem.strip().startswith("accounts[1].ssh.private_key: ")
    assert problem.strip() in ran.err
    assert CANARY not in checked.out + checked.err + ran.out + ran.err


RUNPOD_WITHOUT_KEY = """
    [[accounts]]
    name = "runpod-lab"
    provider = "runpod"
    api_key = { env = "RUNPOD_API_KEY" }
"""


def test_a_runpod_account_without_a_key_is_said_never_to_be_destroyed_as_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What config check says is what the rule does (Settings.evidence, read by both): before,
    # it said "never judged idle" while idle_gpu destroyed on RunPod's figure.
    monkeypatch.setenv("RUNPOD_API_KEY", CANARY)
    code = main(["config", "check", "--config", str(write(tmp_path, RUNPOD_WITHOUT_KEY))])

    captured = capsys.readouterr()
    assert code == 0
    said = (
        "no SSH probe: only RunPod's per-poll utilisation figure, which proves busy, never idle; "
        "its instances are never destroyed as idle"
    )
    assert "warning: accounts[0].ssh: no key_file, private_key or use_agent: " in captured.err
    assert said in captured.err
    assert f"runpod-lab GPU evidence: {said}" in captured.out
    assert 'idle_evidence = "provider_api"' in captured.out


def test_the_opt_in_is_named_with_what_it_can_misjudge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", CANARY)
    monkeypatch.setenv("VAST_API_KEY", CANARY)
    body = (
        RUNPOD_WITHOUT_KEY
        + '    idle_evidence = "provider_api"\n'
        + ONE_ACCOUNT
        + '    idle_evidence = "provider_api"\n'
    )
    code = main(["config", "check", "--config", str(write(tmp_path, body)), "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    warnings = {w["path"]: w["message"] for w in report["warnings"]}
    assert (
        "busy in short bursts between polls can be judged idle and destroyed"
        in (warnings["accounts[0].idle_evidence"])
    )
    assert warnings["accounts[1].idle_evidence"] == (
        "has no effect: Vast.ai's API reports no GPU utilisation"
    )
    evidence = {a["name"]: a["gpu_evidence"] for a in report["accounts"]}
    assert evidence["runpod-lab"].startswith("no SSH probe; RunPod's per-poll utilisation figure")


def test_an_invalid_idle_evidence_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = RUNPOD_WITHOUT_KEY + '    idle_evidence = "api"\n'
    code = main(["config", "check", "--config", str(write(tmp_path, body))])

    assert code == 2
    assert "accounts[0].idle_evidence" in capsys.readouterr().err
