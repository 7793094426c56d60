"""The top-level :class:`Settings` and the sources it is built from.

``load_settings`` (in :mod:`watchdog_gpu.config.load`) reads the TOML file itself (to report
syntax errors with line numbers and to refuse a missing file, which pydantic-settings would
silently ignore) and hands the parsed table and the environment to :class:`Settings` through a
context variable. Precedence: keyword arguments > ``WATCHDOG_GPU_*`` environment > TOML file >
defaults. Constructing ``Settings(...)`` directly (tests, the simulator) uses only the keyword
arguments and the defaults: no file and no environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from watchdog_gpu.config.accounts import AccountConfig
from watchdog_gpu.config.checks import cross_check, duplicate_account_problems
from watchdog_gpu.config.sections import (
    MetricsSection,
    Mode,
    NotifySection,
    ProbeSection,
    RulesConfig,
    WatchdogSection,
)
from watchdog_gpu.errors import ConfigProblem
from watchdog_gpu.evidence import AccountEvidence, account_evidence
from watchdog_gpu.safety import SafetyConfig

ENV_PREFIX = "WATCHDOG_GPU_"
ENV_NESTED_DELIMITER = "__"


@dataclass
class LoadContext:
    """What one ``load_settings`` call hands to the sources and validators of :class:`Settings`.

    ``problems`` collects problems found outside pydantic's field validation (cross-field
    checks, duplicate names), so that they are reported together with the field errors.
    """

    toml: dict[str, Any]
    environ: Mapping[str, str]
    problems: list[ConfigProblem] = field(default_factory=list)


current_load: ContextVar[LoadContext | None] = ContextVar("watchdog_gpu_load", default=None)


class _EnvironmentSource(EnvSettingsSource):
    """``WATCHDOG_GPU_*`` variables from the load's environment mapping instead of os.environ."""

    def next_field(
        self, field: FieldInfo | Any | None, key: str, case_sensitive: bool | None = None
    ) -> FieldInfo | None:
        # [rules] has no field per rule (its tables come from the registry): the rule's model
        # tells how to read a value under it (a JSON list for risky_ports, ...). A type, as the
        # base class returns for a dict's values.
        annotation = field.annotation if isinstance(field, FieldInfo) else field
        if annotation is RulesConfig:
            return RulesConfig.tables().get(key.lower())  # type: ignore[return-value]
        return super().next_field(field, key, case_sensitive)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        context = current_load.get()
        if context is None:
            return {}
        return {key.lower(): value for key, value in context.environ.items()}


class _TomlSource(PydanticBaseSettingsSource):
    """The table ``load_settings`` parsed from the config file."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        context = current_load.get()
        value = None if context is None else context.toml.get(field_name)
        return value, field_name, False

    def __call__(self) -> dict[str, Any]:
        context = current_load.get()
        return {} if context is None else dict(context.toml)


class Settings(BaseSettings):
    """The whole configuration (``config.example.toml`` documents every option)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        frozen=True,
    )

    watchdog: WatchdogSection = Field(
        default_factory=WatchdogSection,
        description="The daemon itself: its mode, intervals, database and logs.",
    )
    metrics: MetricsSection = Field(
        default_factory=MetricsSection, description="The Prometheus endpoint."
    )
    accounts: list[AccountConfig] = Field(
        default_factory=list,
        description=(
            "One [[accounts]] table per provider account. Names are unique and made of "
            'letters, digits, "_", "." and "-" (they appear in file names and metric '
            "labels)."
        ),
        examples=[
            [
                {
                    "name": "vast-main",
                    "provider": "vast",
                    "api_key": {"credential": "vast_api_key"},
                    "ssh": {"private_key": {"credential": "ssh_private_key"}},
                },
                {
                    "name": "runpod-lab",
                    "provider": "runpod",
                    "api_key": {"file": "credentials/runpod_api_key"},
                    "idle_evidence": "ssh",
                    "ssh": {"user": "root", "key_file": "~/.ssh/id_ed25519"},
                },
            ]
        ],
    )
    probe: ProbeSection = Field(
        default_factory=ProbeSection, description="The GPU probe over SSH (nvidia-smi dmon)."
    )
    rules: RulesConfig = Field(
        default_factory=RulesConfig,
        description=(
            "The rules, one [rules.<name>] table each; a rule not written runs with the "
            "defaults shown. Every rule has enabled and mode; rules that stop or destroy "
            "instances also have action, warn_before and salvage (each described at its "
            "first use below)."
        ),
    )
    safety: SafetyConfig = Field(
        default_factory=SafetyConfig,
        description="What no rule may touch, and the limits on how much the rules may do at once.",
    )
    notify: NotifySection = Field(
        default_factory=NotifySection, description="Delivery of notifications through Apprise."
    )

    _config_file: Path | None = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No dotenv and no secrets-dir source: secrets are explicit references (secrets.py).
        return (init_settings, _EnvironmentSource(settings_cls), _TomlSource(settings_cls))

    @model_validator(mode="before")
    @classmethod
    def _note_duplicate_accounts(cls, data: Any) -> Any:
        # Reported even when other fields of the file are invalid (the after-check would not run).
        context = current_load.get()
        accounts = data.get("accounts") if isinstance(data, Mapping) else None
        if context is not None and isinstance(accounts, list):
            names = [item.get("name") if isinstance(item, Mapping) else None for item in accounts]
            _extend_unique(context.problems, duplicate_account_problems(names))
        return data

    @model_validator(mode="after")
    def _cross_check(self) -> Settings:
        problems = cross_check(self)
        context = current_load.get()
        if context is not None:
            _extend_unique(context.problems, problems)
        elif problems:
            raise ValueError("; ".join(str(problem) for problem in problems))
        return self

    @property
    def config_file(self) -> Path | None:
        """The file these settings were loaded from (``None`` when built in code)."""
        return self._config_file

    def effective_mode(self, rule_name: str) -> Mode:
        """The mode a rule runs in: its own ``mode`` unless it is ``inherit``, then the global
        ``[watchdog] mode``. Raises ``KeyError`` for an unknown rule name."""
        mode = self.rules.by_name()[rule_name].mode
        return self.watchdog.mode if mode == "inherit" else mode

    def evidence(self) -> dict[str, AccountEvidence]:
        """What each account's GPU evidence can prove (``watchdog_gpu.evidence``): what the
        rules judge by and ``config check``, ``doctor`` and ``status`` print."""
        return {
            account.name: account_evidence(
                account.name,
                account.provider,
                ssh=self.probe.enabled and account.ssh.has_authentication,
                idle_evidence=account.idle_evidence,
            )
            for account in self.accounts
        }

    def account(self, name: str) -> AccountConfig:
        """The account called ``name``; raises ``KeyError`` if there is none."""
        for account in self.accounts:
            if account.name == name:
                return account
        raise KeyError(name)


def _extend_unique(target: list[ConfigProblem], problems: list[ConfigProblem]) -> None:
    target.extend(problem for problem in problems if problem not in target)
