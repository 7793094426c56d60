"""Secret references: env / file / credential, and the value never leaks into texts."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr, TypeAdapter, ValidationError

from watchdog_gpu.config import (
    ConfigError,
    SecretReference,
    config_warnings,
    load_settings,
    resolve_secrets,
)

CANARY = "canary-secret-7f3a9"
SECRET = TypeAdapter(SecretReference)


def config_with_key(tmp_path: Path, api_key: str, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    text = f"""
    [[accounts]]
    name = "vast-main"
    provider = "vast"
    api_key = {api_key}
    """
    path.write_text(textwrap.dedent(text) + textwrap.dedent(extra), encoding="utf-8")
    return path


@pytest.fixture
def secret_sources(tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """The same canary value given three ways: (TOML reference, environment)."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "vast_api_key").write_text(CANARY + "\n")
    (tmp_path / "vast.key").write_text(CANARY + "\n")
    return {
        "env": ('{ env = "VAST_API_KEY" }', {"VAST_API_KEY": CANARY}),
        "file": (f'{{ file = "{tmp_path / "vast.key"}" }}', {}),
        "credential": (
            '{ credential = "vast_api_key" }',
            {"CREDENTIALS_DIRECTORY": str(credentials)},
        ),
    }


@pytest.mark.parametrize("kind", ["env", "file", "credential"])
def test_a_secret_is_loaded_by_reference_and_never_shown(
    tmp_path: Path,
    kind: str,
    secret_sources: dict[str, tuple[str, dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    reference, environ = secret_sources[kind]
    settings = load_settings(config_with_key(tmp_path, reference), environ)
    api_key = settings.accounts[0].api_key

    value = api_key.resolve(environ)

    assert value is not None
    assert value.get_secret_value() == CANARY  # trailing newline of files stripped
    assert api_key.describe(environ).startswith(f"{kind} ")
    assert api_key.describe(environ).endswith("(set)")
    assert resolve_secrets(settings, environ) == []
    texts = [
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        str(settings.model_dump()),
        api_key.describe(environ),
        repr(api_key),
    ]
    assert not any(CANARY in text for text in texts)
    with caplog.at_level(logging.INFO):
        logging.getLogger("watchdog_gpu.test").info("calling the API with key=%s", value)
        logging.getLogger("watchdog_gpu.test").info(
            "calling the API with key=%s", value.get_secret_value()
        )
    assert CANARY not in caplog.text
    assert "key=***" in caplog.text


def test_a_plain_text_key_works_but_is_masked_and_warned_about(tmp_path: Path) -> None:
    settings = load_settings(config_with_key(tmp_path, f'"{CANARY}"'), {})
    api_key = settings.accounts[0].api_key

    assert api_key.is_plain_text
    assert api_key.resolve({}) == SecretStr(CANARY)
    assert CANARY not in repr(settings)
    assert CANARY not in api_key.describe({})
    warnings = {warning.path: warning.message for warning in config_warnings(settings)}
    assert "plain text" in warnings["accounts[0].api_key"]


def test_an_invalid_config_never_repeats_a_secret_in_its_error(tmp_path: Path) -> None:
    path = config_with_key(
        tmp_path,
        f'"{CANARY}"',
        f"""
        request_timeout = "-1s"
        [accounts.ssh]
        private_key = {{ env = "{CANARY}" }}
        key_passphrase = {{ "{CANARY}" = "x" }}
        """,
    )

    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})

    paths = {problem.path for problem in caught.value.problems}
    assert paths == {
        "accounts[0].request_timeout",
        "accounts[0].ssh.private_key",
        "accounts[0].ssh.key_passphrase",
    }
    assert CANARY not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "exactly one of env, file, credential"),
        ({"env": "A", "file": "/b"}, "exactly one of env, file, credential"),
        ({"enc": "A"}, "found: enc"),
        ({"env": ""}, "non-empty"),
        ({"env": "9LIVES"}, "not an environment variable name"),
        ({"credential": "../etc/shadow"}, "not a path"),
        ({"file": 5}, "non-empty string"),
        (5, "a secret is a string or a table"),
        ("", "empty"),
    ],
)
def test_a_malformed_reference_is_rejected(value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SECRET.validate_python(value)


@pytest.mark.parametrize(
    ("reference", "environ", "detail"),
    [
        (SecretReference.env("K"), {}, "missing"),
        (SecretReference.env("K"), {"K": ""}, "empty"),
        (SecretReference.credential("k"), {}, "missing: $CREDENTIALS_DIRECTORY is not set"),
        (SecretReference.file("/nonexistent/watchdog-gpu/key"), {}, "missing"),
    ],
)
def test_a_missing_secret_resolves_to_none_and_says_why(
    reference: SecretReference, environ: dict[str, str], detail: str
) -> None:
    assert reference.resolve(environ) is None
    assert reference.describe(environ) == f"{reference.source} ({detail})"


def test_an_empty_or_unreadable_secret_file_is_not_a_secret(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    directory = tmp_path / "a-directory"
    directory.mkdir()

    assert SecretReference.file(tmp_path / "empty").describe({}).endswith("(empty)")
    assert "unreadable" in SecretReference.file(directory).describe({})


def test_a_multi_line_private_key_keeps_its_inner_newlines(tmp_path: Path) -> None:
    key = "\n".join(
        [
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAA",
            "-----END OPENSSH PRIVATE KEY-----",
        ]
    )
    (tmp_path / "ssh_private_key").write_text(key + "\n")

    value = SecretReference.credential("ssh_private_key").resolve(
        {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    )

    assert value is not None
    assert value.get_secret_value() == key


def test_run_is_told_about_every_secret_that_is_missing(tmp_path: Path) -> None:
    path = config_with_key(
        tmp_path,
        '{ env = "VAST_API_KEY" }',
        """
        [accounts.ssh]
        key_file = "/nonexistent/id_ed25519"
        [watchdog]
        dead_mans_switch_url = { env = "DMS_URL" }
        [[notify.routes]]
        url = { credential = "ntfy_url" }
        """,
    )
    settings = load_settings(path, {})

    problems = {problem.path: problem.message for problem in resolve_secrets(settings, {})}

    assert set(problems) == {
        "accounts[0].api_key",
        "accounts[0].ssh.key_file",
        "watchdog.dead_mans_switch_url",
        "notify.routes[0].url",
    }
    assert problems["accounts[0].api_key"] == "secret not available: env VAST_API_KEY (missing)"


def test_a_plain_dead_mans_switch_url_must_be_http(tmp_path: Path) -> None:
    path = config_with_key(
        tmp_path, '{ env = "K" }', '[watchdog]\ndead_mans_switch_url = "hc-ping.com/uuid"\n'
    )

    with pytest.raises(ConfigError, match=r"watchdog\.dead_mans_switch_url: must be an http"):
        load_settings(path, {})


def _secret_file(path: Path, mode: int) -> Path:
    path.write_text("key-7f3a\n", encoding="utf-8")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("mode", "readers"),
    [(0o644, "group and others"), (0o640, "group"), (0o604, "others")],
)
def test_a_secret_file_readable_by_others_is_warned_about_once_with_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, readers: str
) -> None:
    key = _secret_file(tmp_path / f"vast-{mode:o}", mode)
    reference = SecretReference.file(key)

    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.secrets"):
        assert reference.resolve({}) == SecretStr("key-7f3a")  # still usable
        reference.resolve({})  # resolved at every use: warned only once

    warnings = [r.getMessage() for r in caplog.records if r.name == "watchdog_gpu.secrets"]
    assert warnings == [
        f"secret file {key} is readable by {readers} (mode {mode:04o}): anyone who can read it "
        f"can use the key; fix: chmod 600 {key}"
    ]
    assert "key-7f3a" not in caplog.text


def test_a_private_secret_file_and_systemd_credentials_are_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private = _secret_file(tmp_path / "private", 0o600)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    _secret_file(credentials / "vast_api_key", 0o644)  # systemd's own directory: its business

    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.secrets"):
        assert SecretReference.file(private).resolve({}) is not None
        resolved = SecretReference.credential("vast_api_key").resolve(
            {"CREDENTIALS_DIRECTORY": str(credentials)}
        )
        assert resolved is not None

    assert not [r for r in caplog.records if r.name == "watchdog_gpu.secrets"]


def test_an_ssh_key_file_readable_by_others_is_warned_about_when_secrets_resolve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key_file = _secret_file(tmp_path / "id_ed25519", 0o644)
    config = config_with_key(tmp_path, '"k"', f'\n[accounts.ssh]\nkey_file = "{key_file}"\n')
    settings = load_settings(config, {})

    with caplog.at_level(logging.WARNING, logger="watchdog_gpu.secrets"):
        assert resolve_secrets(settings, {}) == []

    assert f"secret file {key_file} is readable by group and others" in caplog.text
    assert f"fix: chmod 600 {key_file}" in caplog.text
