"""The sections of the configuration file, one model per TOML table.

Every model is frozen and forbids unknown keys (a typo is an error, never silently ignored).
The rule tables reuse the models of :mod:`watchdog_gpu.rules`, ``[safety]`` the model of
:mod:`watchdog_gpu.safety`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from watchdog_gpu.durations import Duration, PositiveDuration
from watchdog_gpu.rules import registry
from watchdog_gpu.rules.base import RuleConfig, StrictModel, line_errors
from watchdog_gpu.secrets import SecretReference, current_config_directory, resolve_config_path

Mode = Literal["monitor", "enforce"]
Provider = Literal["vast", "runpod", "lambda"]
SeverityName = Literal["info", "warning", "critical"]
ALL_SEVERITIES: tuple[SeverityName, ...] = ("info", "warning", "critical")
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

DEFAULT_METRICS_PORT = 9841  # not in Prometheus' default port allocation list as of 2026
DATABASE_FILE_NAME = "watchdog-gpu.db"
APP_DIRECTORY_NAME = "watchdog-gpu"

# Account names end up in file names (known_hosts), metric labels and CLI arguments.
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
RESERVED_ACCOUNT_NAME = "global"
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9-]{1,63})*")


def default_state_directory(
    environ: Mapping[str, str] | None = None, config_directory: Path | None = None
) -> Path:
    """Where mutable state lives (:func:`state_directory_origin`). Not created."""
    return state_directory_origin(environ, config_directory)[0]


def state_directory_origin(
    environ: Mapping[str, str] | None = None, config_directory: Path | None = None
) -> tuple[Path, str]:
    """The state directory and why it is that one: ``$STATE_DIRECTORY`` (systemd
    ``StateDirectory=``, first entry); else ``<root>/var/lib/watchdog-gpu`` when the
    configuration file sits in ``<root>/etc/watchdog-gpu`` (``config_directory``; the system
    unit's ConfigurationDirectory= and StateDirectory=, so ``sudo watchdog-gpu status`` opens
    the daemon's database); else ``$XDG_STATE_HOME/watchdog-gpu``; else
    ``~/.local/state/watchdog-gpu``."""
    env = os.environ if environ is None else environ
    state = env.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        return Path(state), "$STATE_DIRECTORY"
    system = system_state_directory(config_directory)
    if system is not None:
        return system, f"the system state directory of a configuration in {config_directory}"
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():  # the XDG spec says to ignore relative paths
        return Path(xdg) / APP_DIRECTORY_NAME, "$XDG_STATE_HOME"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "state" / APP_DIRECTORY_NAME, "the user state directory"


def system_state_directory(config_directory: Path | None) -> Path | None:
    """``<root>/var/lib/watchdog-gpu`` for a configuration directory ``<root>/etc/watchdog-gpu``
    (``/etc/watchdog-gpu`` → ``/var/lib/watchdog-gpu``, where the system unit keeps its
    database), else None."""
    if config_directory is None:
        return None
    if config_directory.name != APP_DIRECTORY_NAME or config_directory.parent.name != "etc":
        return None
    return config_directory.parent.parent / "var" / "lib" / APP_DIRECTORY_NAME


def default_database_url(
    environ: Mapping[str, str] | None = None, config_directory: Path | None = None
) -> str:
    """The SQLAlchemy URL of ``watchdog-gpu.db`` in :func:`default_state_directory`."""
    return f"sqlite:///{default_state_directory(environ, config_directory) / DATABASE_FILE_NAME}"


class WatchdogSection(StrictModel):
    """``[watchdog]``: the daemon itself."""

    mode: Mode = Field(
        default="monitor",
        description="monitor: decide, record and notify but change nothing; enforce: act",
    )
    poll_interval: PositiveDuration = Field(
        default=timedelta(seconds=60), description="how often every account is listed"
    )
    probe_interval: PositiveDuration = Field(
        default=timedelta(seconds=60), description="how often running instances are probed"
    )
    database_url: str | None = Field(
        default=None,
        repr=False,  # may carry a database password
        description="SQLAlchemy URL; unset = sqlite file watchdog-gpu.db in the state directory",
    )
    node_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="this daemon's name among watchdogs sharing a PostgreSQL database, and in "
        "every phone message (unset = the host name)",
    )
    leader_lease: PositiveDuration = Field(
        default=timedelta(seconds=30),  # store/rows.DEFAULT_LEADER_LEASE_SECONDS
        ge=timedelta(seconds=2),
        le=timedelta(minutes=10),
        description="a team's leader whose lock session stays silent this long (a frozen "
        "process, a host cut off from the database) is replaced by a standby",
    )
    database_password: SecretReference | None = Field(
        default=None,
        description="the database password (PostgreSQL), kept out of database_url",
    )
    sample_retention: PositiveDuration = Field(
        default=timedelta(days=7), description="GPU samples older than this are deleted"
    )
    # The same default as store/rollup.RAW_SAMPLES_FOR (a test keeps them equal).
    raw_sample_retention: PositiveDuration = Field(
        default=timedelta(hours=2),
        description="raw GPU samples older than this (and than the rules' lookback) are kept "
        "as hourly busy/idle/unknown counts per GPU",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="text: key=value lines; json: one JSON object per line"
    )
    log_level: LogLevel = Field(default="info", description="debug, info, warning, error")
    dead_mans_switch_url: SecretReference | None = Field(
        default=None,
        description="URL pinged (GET) after every healthy tick, e.g. healthchecks.io; "
        "URL + /fail gets the reason (POST) after an unhealthy one",
    )

    # The directory of the configuration file this section was read from (None when built in
    # code): it places the default database (:func:`state_directory_origin`).
    _config_directory: Path | None = PrivateAttr(default=None)

    def model_post_init(self, context: object, /) -> None:
        self._config_directory = current_config_directory()

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url  # lazy: only when a URL is configured
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except (ArgumentError, ValueError):
            raise ValueError(
                "not a database URL (e.g. sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db)"
            ) from None
        return value

    @field_validator("dead_mans_switch_url")
    @classmethod
    def _plain_url_is_http(cls, value: SecretReference | None) -> SecretReference | None:
        if value is not None and value.is_plain_text:
            plain = value.resolve()
            if plain is None or not _is_http_url(plain.get_secret_value()):
                raise ValueError("must be an http:// or https:// URL")
        return value

    def database_origin(self, environ: Mapping[str, str] | None = None) -> str:
        """Why the database is where it is: ``database_url`` or the state directory's origin."""
        if self.database_url is not None:
            return "watchdog.database_url"
        return state_directory_origin(environ, self._config_directory)[1]

    def effective_database_url(self, environ: Mapping[str, str] | None = None) -> str:
        """``database_url``, or :func:`default_database_url` when unset, with
        ``database_password`` (resolved now, registered with the log scrubber) filled in.

        Raises ConfigError when the password reference cannot be resolved."""
        url = self.database_url or default_database_url(environ, self._config_directory)
        if self.database_password is None:
            return url
        secret = self.database_password.resolve(environ)
        if secret is None:
            from watchdog_gpu.errors import ConfigError, ConfigProblem

            raise ConfigError(
                [
                    ConfigProblem(
                        "watchdog.database_password", self.database_password.describe(environ)
                    )
                ]
            )
        from sqlalchemy.engine import make_url

        with_password = make_url(url).set(password=secret.get_secret_value())
        return with_password.render_as_string(hide_password=False)


class MetricsSection(StrictModel):
    """``[metrics]``: the Prometheus endpoint."""

    enabled: bool = Field(default=True, description="serve /metrics")
    listen_address: str = Field(
        default="127.0.0.1", description="address to bind; the endpoint has no authentication"
    )
    port: int = Field(
        default=DEFAULT_METRICS_PORT, ge=0, le=65535, description="TCP port (0 = any free port)"
    )

    @field_validator("listen_address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOST_NAME.fullmatch(value):
                raise ValueError("must be an IP address or a host name") from None
        return value


class AccountSshConfig(StrictModel):
    """``[accounts.ssh]``: how the GPU probe logs in to this account's instances."""

    user: str = Field(default="root", description="login user on the instances")
    key_file: Path | None = Field(
        default=None, description="private key file (relative to the config file's directory)"
    )
    private_key: SecretReference | None = Field(
        default=None, description="private key contents, e.g. { credential = 'ssh_key' }"
    )
    key_passphrase: SecretReference | None = Field(
        default=None, description="passphrase of an encrypted private key"
    )
    use_agent: bool = Field(default=False, description="also offer keys from $SSH_AUTH_SOCK")

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

    name: str = Field(description="unique; letters, digits, '_', '.', '-'")
    provider: Provider = Field(description="vast, runpod or lambda")
    api_key: SecretReference = Field(description="the API key (a secret reference)")
    api_url: str | None = Field(
        default=None, description="API base URL; unset = the provider's public endpoint"
    )
    request_timeout: PositiveDuration = Field(
        default=timedelta(seconds=30), description="timeout of one API request"
    )
    retry_budget: Duration = Field(
        default=timedelta(seconds=60),
        description="total time retries of one call may take (429/5xx/timeouts)",
    )
    protect: bool = Field(
        default=False, description="never stop or destroy anything in this account"
    )
    ssh: AccountSshConfig = Field(default_factory=AccountSshConfig)
    idle_evidence: Literal["ssh", "provider_api"] = Field(
        default="ssh",
        description=(
            "what may prove this account's GPUs idle: ssh (the probe's dmon rows only) or "
            "provider_api (RunPod's per-poll utilisation figure too: a GPU busy in short bursts "
            "between polls can be judged idle and destroyed; docs/safety.md)"
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
        if not _is_http_url(value):
            raise ValueError("must be an http:// or https:// URL with a host")
        if urlsplit(value).username or urlsplit(value).password:
            raise ValueError("must not contain credentials (the API key goes in api_key)")
        return value.rstrip("/")


class ProbeSection(StrictModel):
    """``[probe]``: the GPU probe over SSH (``nvidia-smi dmon``)."""

    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {
        "sample_interval_seconds": ("sample_interval", "s")
    }

    enabled: bool = Field(default=True, description="probe running instances over SSH")
    mode: Literal["stream", "burst"] = Field(
        default="stream",
        description=(
            "stream: one long-lived nvidia-smi dmon per host, every second observed (a host that "
            "does not allow it falls back to burst); burst: dmon -c N once per probe_interval"
        ),
    )
    stall_after: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description=(
            "a stream without a row for this long beyond its 6 s batch interval is reconnected"
            " (the gap is blind)"
        ),
    )
    # Probes mostly wait (10 s of dmon sampling each): ~instances x 10 s / probe_interval
    # sessions are needed to probe every instance each interval (bench/README.md).
    workers: int = Field(
        default=32, ge=1, le=256, description="parallel burst-mode SSH sessions at most"
    )
    connect_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="TCP connect timeout"
    )
    banner_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="wait this long for the SSH banner"
    )
    auth_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="SSH authentication timeout"
    )
    command_deadline: PositiveDuration = Field(
        default=timedelta(seconds=45), description="the whole remote command must finish by this"
    )
    samples_per_probe: int = Field(
        default=10, ge=1, le=600, description="dmon samples per probe (dmon -c)"
    )
    sample_interval: PositiveDuration = Field(
        default=timedelta(seconds=1),
        description="between dmon samples (dmon -d): whole seconds, 1s to 60s",
    )

    @field_validator("sample_interval")
    @classmethod
    def _whole_seconds(cls, value: timedelta) -> timedelta:
        seconds = value.total_seconds()
        if seconds != int(seconds) or not 1 <= seconds <= 60:
            raise ValueError("must be a whole number of seconds from 1s to 60s (dmon -d)")
        return value

    @property
    def sample_interval_seconds(self) -> int:
        """``sample_interval`` in seconds (the deprecated key's unit; dmon's ``-d``)."""
        return int(self.sample_interval.total_seconds())


ConfigT = TypeVar("ConfigT", bound=RuleConfig)


class RulesConfig(BaseModel):
    """``[rules.*]``: one table per rule of the registry (``rules.registry.RULES``), validated
    by that rule's config model; a rule not written runs with its defaults."""

    # Tables are known only from the registry, so they live as extras, each a rule's model.
    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, RuleConfig] = Field(init=False)

    @classmethod
    def tables(cls) -> dict[str, type[RuleConfig]]:
        """Every rule's table name and config model, in the registry's order."""
        return {name: rule.config_model for name, rule in registry.RULES.items()}

    @model_validator(mode="wrap")
    @classmethod
    def _by_registry(cls, data: Any, handler: ModelWrapValidatorHandler[RulesConfig]) -> Any:
        if isinstance(data, RulesConfig) or not isinstance(data, Mapping):
            return handler(data)  # not a table: pydantic says so
        errors: list[InitErrorDetails] = [
            {"type": "extra_forbidden", "loc": (str(name),), "input": None}
            for name in data
            if name not in registry.RULES
        ]
        tables: dict[str, RuleConfig] = {}
        for name, model in cls.tables().items():
            value = data.get(name, {})
            try:
                tables[name] = value if isinstance(value, model) else model.model_validate(value)
            except ValidationError as error:
                for item in line_errors(error):
                    item["loc"] = (name, *item["loc"])
                    errors.append(item)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return handler(tables)

    def of(self, model: type[ConfigT]) -> ConfigT:
        """The configuration of the rule whose config model is ``model`` (typed)."""
        for config in self.by_name().values():
            if isinstance(config, model) and type(config) is model:
                return config
        raise KeyError(model.__name__)

    def by_name(self) -> dict[str, RuleConfig]:
        """Every rule's config keyed by rule name, in the registry's order."""
        return dict(self.__pydantic_extra__ or {})


class NotifyRoute(StrictModel):
    """``[[notify.routes]]``: one Apprise URL and the severities it receives."""

    url: SecretReference = Field(
        description="Apprise URL; it embeds tokens, so prefer a reference { env = ... }"
    )
    severities: list[SeverityName] = Field(
        default_factory=lambda: list(ALL_SEVERITIES),
        min_length=1,
        description="which messages go to this route",
    )

    @field_validator("severities")
    @classmethod
    def _unique(cls, value: list[SeverityName]) -> list[SeverityName]:
        if len(set(value)) != len(value):
            raise ValueError("each severity at most once")
        return value


class NotifySection(StrictModel):
    """``[notify]``: delivery of notifications through Apprise."""

    routes: list[NotifyRoute] = Field(default_factory=list, description="where messages go")
    config: SecretReference | None = Field(
        default=None,
        description="an Apprise config file (YAML or text) whose services are tagged with the "
        "severities they receive (info, warning, critical, or always): a path, or a secret "
        "reference to its contents; beside or instead of routes",
    )
    retry_initial: PositiveDuration = Field(
        default=timedelta(seconds=30), description="first retry delay of a failed delivery"
    )
    retry_max: PositiveDuration = Field(
        default=timedelta(minutes=30), description="retry delays double up to this"
    )
    timeout: PositiveDuration = Field(
        default=timedelta(seconds=15), description="timeout of one delivery attempt"
    )

    @field_validator("config", mode="before")
    @classmethod
    def _a_path_is_a_file(cls, value: object) -> object:
        # A plain string here is the file's path, never the config text itself.
        return {"file": value} if isinstance(value, str) else value


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)
