"""Loading the configuration: file lookup, environment overrides, every problem by dotted path."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from watchdog_gpu.config import (
    AccountConfig,
    ConfigError,
    RulesConfig,
    SafetyConfig,
    SecretReference,
    Settings,
    default_database_url,
    default_state_directory,
    find_config_file,
    load_settings,
)
from watchdog_gpu.rules.hygiene import HygieneConfig
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig

FIXTURES = Path(__file__).parent.parent / "fixtures" / "config"
EXAMPLE = Path(__file__).parent.parent.parent / "config.example.toml"

ACCOUNT = """
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = { env = "VAST_API_KEY" }
"""


def write(directory: Path, text: str, name: str = "config.toml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_of(path: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ or {})
    return {problem.path: problem.message for problem in caught.value.problems}


def test_the_example_validates_in_monitor_mode_with_every_rule_and_safety_default() -> None:
    settings = load_settings(EXAMPLE, {})

    assert settings.watchdog.mode == "monitor"
    assert [(a.name, a.provider) for a in settings.accounts] == [
        ("vast-main", "vast"),
        ("runpod-lab", "runpod"),
    ]
    # the system unit's credential form first, a file for the user unit second
    assert settings.accounts[0].api_key == SecretReference.credential("vast_api_key")
    runpod_key = SecretReference.file(EXAMPLE.absolute().parent / "credentials" / "runpod_api_key")
    assert settings.accounts[1].api_key == runpod_key
    assert settings.rules == RulesConfig()
    assert settings.safety == SafetyConfig()
    assert settings.config_file == EXAMPLE.absolute()
    assert all(settings.effective_mode(name) == "monitor" for name in settings.rules.by_name())


def test_a_config_with_three_mistakes_reports_all_three_by_dotted_path() -> None:
    problems = problems_of(FIXTURES / "three_mistakes.toml")

    assert set(problems) == {
        "accounts[1].api_key",
        "rules.idle_gpu.idle_minuts",
        "rules.stopped_disk.after",
    }
    assert "exactly one of env, file, credential" in problems["accounts[1].api_key"]
    assert "did you mean 'idle' (formerly 'idle_minutes')" in problems["rules.idle_gpu.idle_minuts"]
    assert "negative" in problems["rules.stopped_disk.after"]


def test_an_unknown_key_lists_the_options_of_its_table(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT + "[metrics]\nprot = 9000\n")

    message = problems_of(path)["metrics.prot"]

    assert "unknown option" in message
    assert "did you mean 'port'" in message
    assert "enabled, listen_address, port" in message


def test_an_unknown_top_level_table_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT + "[notifications]\nurl = 'x'\n")

    assert "unknown option" in problems_of(path)["notifications"]


def test_a_duplicate_account_is_reported_on_the_second_even_when_another_field_is_wrong(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        ACCOUNT + ACCOUNT.replace('"vast"', '"runpod"') + "[probe]\nworkers = 0\n",
    )

    problems = problems_of(path)

    assert "duplicate account name 'vast-main'" in problems["accounts[1].name"]
    assert "accounts[0]" in problems["accounts[1].name"]
    assert "probe.workers" in problems
    assert "accounts[0].name" not in problems


def test_an_unknown_provider_names_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT.replace('provider = "vast"', 'provider = "vastai"'))

    message = problems_of(path)["accounts[0].provider"]

    assert "'vast', 'runpod' or 'lambda'" in message
    assert "'vastai'" in message


@pytest.mark.parametrize(
    ("table", "option", "value", "expected"),
    [
        ("watchdog", "poll_interval", '"-1m"', "negative"),
        ("watchdog", "poll_interval", '"0s"', "longer than 0s"),
        ("watchdog", "raw_sample_retention", '"0s"', "longer than 0s"),
        ("watchdog", "raw_sample_retention", '"two hours"', "not a duration"),
        ("probe", "connect_timeout", "10", "with a unit"),
        ("rules.paused_interruptible", "after", '"soon"', "not a duration"),
    ],
)
def test_a_bad_duration_gets_a_clear_message(
    tmp_path: Path, table: str, option: str, value: str, expected: str
) -> None:
    path = write(tmp_path, ACCOUNT + f"[{table}]\n{option} = {value}\n")

    assert expected in problems_of(path)[f"{table}.{option}"]


def test_a_toml_syntax_error_is_one_problem_with_its_line_number(tmp_path: Path) -> None:
    path = write(tmp_path, '[watchdog]\nmode = "monitor"\npoll_interval = 1m\n')

    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})

    (problem,) = caught.value.problems
    assert "line 3" in problem.message
    assert str(path) in problem.message


def test_a_file_named_with_config_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError, match=r"nope\.toml does not exist \(--config\)"):
        load_settings(missing, {})


def test_a_file_named_by_the_environment_must_exist(tmp_path: Path) -> None:
    environ = {"WATCHDOG_GPU_CONFIG": str(tmp_path / "nope.toml")}

    with pytest.raises(ConfigError, match=r"does not exist \(\$WATCHDOG_GPU_CONFIG\)"):
        load_settings(None, environ)


def test_when_no_file_is_found_the_error_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    with pytest.raises(ConfigError) as caught:
        find_config_file(None, environ, system_file=tmp_path / "etc" / "config.toml")

    message = str(caught.value)
    assert str(tmp_path / "watchdog-gpu.toml") in message
    assert str(tmp_path / "xdg" / "watchdog-gpu" / "config.toml") in message
    assert str(tmp_path / "etc" / "config.toml") in message


def test_lookup_order_is_flag_then_environment_then_cwd_then_user_then_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    flag = write(tmp_path, ACCOUNT, "flag.toml")
    named = write(tmp_path, ACCOUNT, "named.toml")
    local = write(cwd, ACCOUNT, "watchdog-gpu.toml")
    user = write(tmp_path, ACCOUNT, "xdg/watchdog-gpu/config.toml")
    system = write(tmp_path, ACCOUNT, "etc/config.toml")
    monkeypatch.chdir(cwd)
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "WATCHDOG_GPU_CONFIG": str(named)}

    def found(path: Path | None) -> tuple[Path, str]:
        location = find_config_file(path, environ, system_file=system)
        return location.path, location.origin

    assert found(flag) == (flag, "--config")
    assert found(None) == (named, "$WATCHDOG_GPU_CONFIG")
    del environ["WATCHDOG_GPU_CONFIG"]
    assert found(None) == (local, "current directory")
    local.unlink()
    assert found(None) == (user, "user config")
    user.unlink()
    assert found(None) == (system, "system config")


def test_the_user_config_defaults_to_dot_config_in_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    user = write(tmp_path, ACCOUNT, "home/.config/watchdog-gpu/config.toml")

    location = find_config_file(None, {"HOME": str(tmp_path / "home")}, system_file=tmp_path / "x")

    assert location.path == user


def test_environment_variables_override_nested_values_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT + "[rules.idle_gpu]\nidle_minutes = 20\narm_after = '5m'\n")
    environ = {
        "WATCHDOG_GPU_RULES__IDLE_GPU__IDLE_MINUTES": "45",
        "WATCHDOG_GPU_WATCHDOG__MODE": "enforce",
        "watchdog_gpu_metrics__port": "19108",
        "WATCHDOG_GPU_SAFETY__PROTECT_NAMES": '["*keep*"]',
        "WATCHDOG_GPU_RULES__HYGIENE__RISKY_PORTS": "[22, 3389]",
    }

    settings = load_settings(path, environ)

    assert settings.rules.of(IdleGpuConfig).idle_minutes == 45
    assert settings.rules.of(HygieneConfig).risky_ports == [22, 3389]  # JSON, per the model
    assert settings.rules.of(IdleGpuConfig).arm_after == timedelta(minutes=5)  # the file's, kept
    assert settings.watchdog.mode == "enforce"
    assert settings.metrics.port == 19108
    assert settings.safety.protect_names == ["*keep*"]


def test_accounts_can_be_replaced_from_the_environment_as_json(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT)
    environ = {
        "WATCHDOG_GPU_ACCOUNTS": '[{"name": "lab", "provider": "lambda", '
        '"api_key": {"credential": "lambda_key"}}]'
    }

    settings = load_settings(path, environ)

    assert [account.name for account in settings.accounts] == ["lab"]
    assert settings.accounts[0].api_key == SecretReference.credential("lambda_key")


def test_a_bad_environment_override_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT)

    problems = problems_of(path, {"WATCHDOG_GPU_METRICS__PORT": "ninety"})

    assert "(from $WATCHDOG_GPU_METRICS__PORT)" in problems["metrics.port"]


def test_a_misspelt_environment_override_is_an_error_not_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT)

    with pytest.raises(ConfigError, match="unknown environment variable WATCHDOG_GPU_METRIC__PORT"):
        load_settings(path, {"WATCHDOG_GPU_METRIC__PORT": "1"})


def test_a_prefixed_variable_that_is_no_override_is_left_alone(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT.replace('"VAST_API_KEY"', '"WATCHDOG_GPU_VAST__KEY"'))
    environ = {"WATCHDOG_GPU_VAST__KEY": "k" * 20, "WATCHDOG_GPU_CLIENT_VENVS": "/ci/venvs"}

    settings = load_settings(path, environ)

    assert settings.accounts[0].api_key == SecretReference.env("WATCHDOG_GPU_VAST__KEY")


def test_settings_built_in_code_read_neither_file_nor_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WATCHDOG_GPU_WATCHDOG__MODE", "enforce")

    assert Settings().watchdog.mode == "monitor"


def test_settings_built_in_code_still_refuse_duplicate_accounts() -> None:
    account = AccountConfig(name="a", provider="vast", api_key=SecretReference.env("K"))

    with pytest.raises(ValidationError, match="duplicate account name 'a'"):
        Settings(accounts=[account, account])


def test_a_rule_mode_overrides_the_global_mode(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ACCOUNT + "[watchdog]\nmode = 'monitor'\n[rules.paused_interruptible]\nmode = 'enforce'\n",
    )

    settings = load_settings(path, {})

    assert settings.effective_mode("paused_interruptible") == "enforce"
    assert settings.effective_mode("idle_gpu") == "monitor"


@pytest.mark.parametrize(
    ("extra", "path", "expected"),
    [
        (
            "[safety]\nprotect_accounts = ['vast-mian']\n",
            "safety.protect_accounts[0]",
            "no account",
        ),
        ("[safety]\nprotect_ids = ['runpod/abc']\n", "safety.protect_ids[0]", "no account"),
        ("[rules.budget.accounts.other]\ndaily_usd = 5.0\n", "rules.budget.accounts.other", "no"),
        (
            "[probe]\nsamples_per_probe = 30\ncommand_deadline = '20s'\n",
            "probe.command_deadline",
            "",
        ),
        (
            "[notify]\nretry_initial = '1h'\nretry_max = '10m'\n",
            "notify.retry_initial",
            "retry_max",
        ),
        (
            "[watchdog]\nsample_retention = '10m'\n",
            "watchdog.sample_retention",
            "rules.idle_gpu.idle",
        ),
    ],
)
def test_cross_references_are_checked(tmp_path: Path, extra: str, path: str, expected: str) -> None:
    config = write(tmp_path, ACCOUNT + extra)

    assert expected in problems_of(config)[path]


@pytest.mark.parametrize("name", ["../etc", "a b", "..", "", "x" * 65, "vast/main"])
def test_an_account_name_that_is_unsafe_in_paths_is_rejected(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, ACCOUNT.replace('"vast-main"', f'"{name}"'))

    assert "accounts[0].name" in problems_of(path)


def test_the_metrics_fleet_scope_is_not_an_account_name(tmp_path: Path) -> None:
    path = write(tmp_path, ACCOUNT.replace('"vast-main"', '"global"'))

    assert "reserved" in problems_of(path)["accounts[0].name"]


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("http://127.0.0.1:8081/", "http://127.0.0.1:8081"),
        ("https://console.vast.ai/api/v0", "https://console.vast.ai/api/v0"),
        ("ftp://example.com", None),
        ("https://user:pw@example.com", None),
        ("console.vast.ai", None),
    ],
)
def test_api_url_must_be_http_without_credentials(
    tmp_path: Path, url: str, accepted: str | None
) -> None:
    path = write(tmp_path, ACCOUNT + f'api_url = "{url}"\n')

    if accepted is None:
        message = problems_of(path)["accounts[0].api_url"]
        assert "pw" not in message
    else:
        assert load_settings(path, {}).accounts[0].api_url == accepted


def test_relative_paths_are_taken_from_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write(
        tmp_path / "etc",
        ACCOUNT.replace('{ env = "VAST_API_KEY" }', '{ file = "keys/vast" }')
        + '[accounts.ssh]\nkey_file = "keys/id_ed25519"\n',
    )

    account = load_settings(config, {}).accounts[0]

    assert account.api_key == SecretReference.file(tmp_path / "etc" / "keys" / "vast")
    assert account.ssh.key_file == tmp_path / "etc" / "keys" / "id_ed25519"


def test_an_account_takes_key_file_or_private_key_not_both(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ACCOUNT + '[accounts.ssh]\nkey_file = "/k"\nprivate_key = { credential = "ssh" }\n',
    )

    assert "not both" in problems_of(path)["accounts[0].ssh"]


def test_a_database_url_must_parse_and_never_shows_in_repr(tmp_path: Path) -> None:
    good = write(tmp_path, ACCOUNT + "[watchdog]\ndatabase_url = 'postgresql://u:pw9x@db/wg'\n")
    bad = write(tmp_path, ACCOUNT + "[watchdog]\ndatabase_url = 'not a url'\n", "bad.toml")

    settings = load_settings(good, {})

    assert settings.watchdog.effective_database_url({}) == "postgresql://u:pw9x@db/wg"
    assert "pw9x" not in repr(settings)
    assert "not a database URL" in problems_of(bad)["watchdog.database_url"]


def test_the_default_database_lives_in_the_state_directory() -> None:
    assert default_database_url({"STATE_DIRECTORY": "/var/lib/watchdog-gpu:/other"}) == (
        "sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db"
    )
    assert default_state_directory({"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}) == Path(
        "/x/state/watchdog-gpu"
    )
    assert default_state_directory({"XDG_STATE_HOME": "relative", "HOME": "/home/u"}) == Path(
        "/home/u/.local/state/watchdog-gpu"
    )
    assert default_database_url({"HOME": "/home/u"}) == (
        "sqlite:////home/u/.local/state/watchdog-gpu/watchdog-gpu.db"
    )


def test_a_configuration_in_etc_watchdog_gpu_keeps_its_database_in_var_lib(
    tmp_path: Path,
) -> None:
    # The system unit's ConfigurationDirectory= and StateDirectory=: `sudo watchdog-gpu status`
    # has neither $STATE_DIRECTORY nor the daemon's home, and must open the daemon's database.
    system = tmp_path / "etc" / "watchdog-gpu" / "config.toml"
    user = tmp_path / "home" / "u" / ".config" / "watchdog-gpu" / "config.toml"
    for path in (system, user):
        path.parent.mkdir(parents=True)
        path.write_text('[watchdog]\nmode = "monitor"\n')
    root_env = {"HOME": "/root", "XDG_STATE_HOME": "/root/state"}

    in_etc = load_settings(system, root_env).watchdog
    in_home = load_settings(user, root_env).watchdog

    assert in_etc.effective_database_url(root_env) == (
        f"sqlite:///{tmp_path}/var/lib/watchdog-gpu/watchdog-gpu.db"
    )
    assert in_etc.database_origin(root_env).startswith("the system state directory")
    assert in_etc.effective_database_url({"STATE_DIRECTORY": "/srv/wd"}) == (
        "sqlite:////srv/wd/watchdog-gpu.db"
    )
    assert in_home.effective_database_url(root_env) == (
        "sqlite:////root/state/watchdog-gpu/watchdog-gpu.db"
    )


def test_every_public_name_of_the_lazy_config_package_is_its_modules_object() -> None:
    import importlib

    import watchdog_gpu.config as package

    for name in package.__all__:
        value = getattr(package, name)
        home = importlib.import_module(package._HOMES[name])
        assert value is getattr(home, name), name
    assert set(package.__all__) == set(package._HOMES)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'Setings'"):
        _ = package.Setings
