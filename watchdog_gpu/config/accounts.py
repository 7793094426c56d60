"""``[[accounts]]``: the provider accounts and how the probe logs in to their instances."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from watchdog_gpu.config.sections import is_http_url
from watchdog_gpu.durations import Duration, PositiveDuration
from watchdog_gpu.rules.base import StrictModel
from watchdog_gpu.secrets import SecretReference, resolve_config_path

Provider = Literal["vast", "runpod", "lambda"]

# Account names end up in file names (known_hosts), metric labels and CLI arguments.
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
RESERVED_ACCOUNT_NAME = "global"
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


class AccountSshConfig(StrictModel):
    """``[accounts.ssh]``: how the GPU probe logs in to this account's instances."""

    user: str = Field(default="root", description="Login user on the instances.")
    key_file: Path | None = Field(
        default=None,
        description=(
            "A private key file (relative paths are taken from this file's directory; ~ "
            "is expanded), for the user unit or a shell (the system unit cannot read a "
            "home directory). Use either key_file or private_key, not both."
        ),
        examples=["~/.ssh/id_ed25519"],
    )
    private_key: SecretReference | None = Field(
        default=None,
        description=(
            "The private key's contents as a secret reference. Under the system unit:\n  "
            "LoadCredential=ssh_private_key:/etc/watchdog-gpu/credentials/id_ed25519"
        ),
        examples=[{"credential": "ssh_private_key"}],
    )
    key_passphrase: SecretReference | None = Field(
        default=None,
        description="Passphrase of an encrypted private key (a secret reference).",
        examples=[{"credential": "ssh_key_passphrase"}],
    )
    use_agent: bool = Field(
        default=False,
        description=(
            "Also offer keys from a running ssh-agent ($SSH_AUTH_SOCK; not under the system unit)."
        ),
    )

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _SSH_USER.fullmatch(value):
            raise ValueError("a user name of letters, digits, '_', '.', '-' (at most 32)")
        return value

    @field_validator("key_file")
    @classmethod
    def _key_file(cls, value: Path | None) -> Path | None:
        return None if value is None else resolve_config_path(value)

    @model_validator(mode="after")
    def _one_key_source(self) -> AccountSshConfig:
        if self.key_file is not None and self.private_key is not None:
            raise ValueError("set key_file or private_key, not both")
        return self

    @property
    def has_authentication(self) -> bool:
        return self.key_file is not None or self.private_key is not None or self.use_agent


class AccountConfig(StrictModel):
    """``[[accounts]]``: one provider account."""

    name: str = Field(
        description=(
            'Unique; letters, digits, "_", "." and "-" (it appears in file names and '
            "metric labels)."
        ),
        examples=["vast-main"],
    )
    provider: Provider = Field(description='One of "vast", "runpod", "lambda".', examples=["vast"])
    api_key: SecretReference = Field(
        description=(
            "The API key (required), a secret reference. Under the system unit:\n"
            "  LoadCredential=vast_api_key:/etc/watchdog-gpu/credentials/vast_api_key\n"
            "From a shell:\n"
            '  api_key = { env = "VAST_API_KEY" }\n'
            "Under the user unit, a file only you can read:\n"
            '  api_key = { file = "credentials/runpod_api_key" }'
        ),
        examples=[{"credential": "vast_api_key"}],
    )
    api_url: str | None = Field(
        default=None,
        description=(
            "API base URL; not set means the provider's public endpoint. Useful for a "
            "proxy or to point the daemon at `watchdog-gpu sim serve`."
        ),
        examples=["http://127.0.0.1:8081"],
    )
    request_timeout: PositiveDuration = Field(
        default=timedelta(seconds=30), description="Timeout of one API request."
    )
    retry_budget: Duration = Field(
        default=timedelta(seconds=60),
        description=(
            "Total time the retries of one call may take (429, 5xx and timeouts are "
            "retried with exponential backoff and jitter, honouring Retry-After)."
        ),
    )
    protect: bool = Field(
        default=False,
        description=(
            "true: nothing in this account is ever stopped or destroyed (still watched "
            "and reported)."
        ),
    )
    ssh: AccountSshConfig = Field(
        default_factory=AccountSshConfig,
        description=(
            "How the GPU probe logs in to this account's instances (key authentication only)."
        ),
    )
    idle_evidence: Literal["ssh", "provider_api"] = Field(
        default="ssh",
        description=(
            "What may prove this account's GPUs idle (docs/safety.md, \"Evidence "
            'strength"):\n  "ssh" (default): only the probe\'s nvidia-smi dmon rows. '
            "RunPod's utilisation figure (one\n    reading per poll) still proves a GPU "
            "busy, never idle: a pod the probe cannot see is never\n    destroyed as "
            'idle, only alerted ("looks idle per the provider, not destroyed").\n  '
            '"provider_api": RunPod\'s figure may prove idle too, for pods the probe '
            "cannot reach. It can\n    misjudge: a GPU busy in short bursts between polls "
            "reads 0 % and is destroyed as idle.\n    No effect on Vast.ai and Lambda "
            "(their APIs report no GPU utilisation)."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _ACCOUNT_NAME.fullmatch(value) or set(value) == {"."}:
            raise ValueError("use 1-64 letters, digits, '_', '.', '-' (the name is used in paths)")
        if value == RESERVED_ACCOUNT_NAME:
            # The metrics' spend and budget series label the whole fleet scope="global" and each
            # account scope=<name>: an account called so would be mixed into the fleet's series.
            raise ValueError(
                f"{RESERVED_ACCOUNT_NAME!r} is reserved (the metrics' whole-fleet scope); "
                "choose another name"
            )
        return value

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not is_http_url(value):
            raise ValueError("must be an http:// or https:// URL with a host")
        if urlsplit(value).username or urlsplit(value).password:
            raise ValueError("must not contain credentials (the API key goes in api_key)")
        return value.rstrip("/")
