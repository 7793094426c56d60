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

from watchdog_gpu.digest import DigestConfig
from watchdog_gpu.durations import PositiveDuration
from watchdog_gpu.rules import registry
from watchdog_gpu.rules.base import RuleConfig, StrictModel, line_errors
from watchdog_gpu.secrets import SecretReference, current_config_directory

Mode = Literal["monitor", "enforce"]
SeverityName = Literal["info", "warning", "critical"]
ALL_SEVERITIES: tuple[SeverityName, ...] = ("info", "warning", "critical")
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

DEFAULT_METRICS_PORT = 9841  # not in Prometheus' default port allocation list as of 2026
DATABASE_FILE_NAME = "watchdog-gpu.db"
APP_DIRECTORY_NAME = "watchdog-gpu"

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
        description=(
            '"monitor": every rule is evaluated, recorded, notified and exported exactly '
            "as in enforce mode, marked dry-run, and nothing is stopped or destroyed. "
            'Watch what it would do for a few days, then switch to "enforce" (here, or '
            "per rule with [rules.<name>] mode)."
        ),
    )
    poll_interval: PositiveDuration = Field(
        default=timedelta(seconds=60),
        description="How often every account is listed (instances, volumes, balance).",
    )
    probe_interval: PositiveDuration = Field(
        default=timedelta(seconds=60),
        description="How often running instances are probed over SSH (nvidia-smi dmon).",
    )
    database_url: str | None = Field(
        default=None,
        repr=False,  # may carry a database password
        description=(
            "SQLAlchemy database URL. Not set: an SQLite file watchdog-gpu.db in "
            "$STATE_DIRECTORY (systemd StateDirectory=), else in /var/lib/watchdog-gpu/ "
            "when this file is /etc/watchdog-gpu/config.toml (the system unit's database, "
            "so `sudo watchdog-gpu status` reads it too), else "
            "$XDG_STATE_HOME/watchdog-gpu/, else ~/.local/state/watchdog-gpu/.\nA team's "
            "shared PostgreSQL (pip install 'watchdog-gpu[postgresql]'; "
            "docs/postgresql.md) is a URL like "
            '"postgresql+psycopg://watchdog@db.example.internal/watchdog".'
        ),
        examples=["sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db"],
    )
    node_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "This daemon's name among watchdogs that share one PostgreSQL database (one "
            "leads, the others stand by); shown by `status` and the watchdog_gpu_leader "
            'metric, and every phone message ends "Sent by watchdog-gpu on <node_name>". '
            "Not set: the host name."
        ),
        examples=["vps-1"],
    )
    leader_lease: PositiveDuration = Field(
        default=timedelta(seconds=30),  # store/rows.DEFAULT_LEADER_LEASE_SECONDS
        ge=timedelta(seconds=2),
        le=timedelta(minutes=10),
        description=(
            "A team's leader whose database session stays silent this long (a frozen "
            "process, a host cut off from the database) is replaced by a standby; a live "
            "leader renews every 5 s at most."
        ),
    )
    database_password: SecretReference | None = Field(
        default=None,
        description=(
            "The database password (PostgreSQL), kept out of database_url: a secret "
            "reference, like the API keys."
        ),
        examples=[{"credential": "database-password"}],
    )
    sample_retention: PositiveDuration = Field(
        default=timedelta(days=7),
        description=(
            "GPU samples, probe outcomes and hourly GPU summaries older than this are "
            "deleted (must cover the longest idle window)."
        ),
    )
    # The same default as store/rollup.RAW_SAMPLES_FOR (a test keeps them equal).
    raw_sample_retention: PositiveDuration = Field(
        default=timedelta(hours=2),
        description=(
            "Raw GPU samples older than this (and than the rules' lookback, 73 minutes by "
            "default) are kept as hourly busy/idle/unknown counts per GPU: about 14 MiB a "
            "day for 1,000 instances of 2 GPUs, where their raw samples take about 21 MiB "
            "an hour (a whole day of them ≈ 500 MiB)."
        ),
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description=(
            'Log lines on stderr: "text" (logfmt, journald friendly) or "json" (one '
            "object per line). Either way msg is a short phrase and every fact is a field "
            "of its own (instance=, account=, state=, rule=, action=...), for Loki's `| "
            "logfmt` or `| json`.\nUnder systemd each line starts with its priority (<4> "
            "warning ...), so `journalctl -p warning` works; on a terminal the lines are "
            "plain. A probe is logged once per host per state change (at most 60 such "
            "lines a minute, and a summary every 10 minutes while hosts fail)."
        ),
    )
    log_level: LogLevel = Field(
        default="info",
        description=(
            "One of debug, info, warning, error, critical. Libraries that see URLs or "
            "secrets (urllib3, httpx, apprise, paramiko, alembic ...) stay at warning "
            "even at debug, and every secret and notification-URL token is masked in "
            "every line."
        ),
    )
    dead_mans_switch_url: SecretReference | None = Field(
        default=None,
        description=(
            "A URL pinged (HTTP GET) after every healthy tick, for a dead man's switch "
            "such as healthchecks.io: if the pings stop, that service alerts you. After "
            'an unhealthy tick the daemon POSTs the reason to the URL + "/fail" '
            "(healthchecks.io alerts at once). A secret reference or a URL."
        ),
        examples=[{"env": "WATCHDOG_DMS_URL"}],
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
            if plain is None or not is_http_url(plain.get_secret_value()):
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

    enabled: bool = Field(
        default=True, description="Serve Prometheus metrics at http://LISTEN_ADDRESS:PORT/metrics."
    )
    listen_address: str = Field(
        default="127.0.0.1",
        description=(
            "The address to bind. The endpoint has no authentication: keep it on loopback "
            "unless a firewall protects it."
        ),
    )
    port: int = Field(
        default=DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description=(
            "9841 is not taken by any exporter in Prometheus' port allocation list. 0 "
            "picks a free port."
        ),
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


class ProbeSection(StrictModel):
    """``[probe]``: the GPU probe over SSH (``nvidia-smi dmon``)."""

    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {
        "sample_interval_seconds": ("sample_interval", "s")
    }

    enabled: bool = Field(
        default=True,
        description=(
            "Probe running instances over SSH. Without probes no instance is ever judged "
            'idle (it is "unobserved"; RunPod\'s utilisation figure proves busy only, '
            "unless the account opts in with its idle_evidence); the time-limit and "
            "budget rules still protect the money."
        ),
    )
    mode: Literal["stream", "burst"] = Field(
        default="stream",
        description=(
            '"stream": one long-lived nvidia-smi dmon per host on the kept SSH '
            "connection, read every second (docs/probe.md); a host that does not allow a "
            'long-running command falls back to "burst": nvidia-smi dmon -c '
            "samples_per_probe once per probe_interval (the settings below)."
        ),
    )
    stall_after: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description=(
            "A stream without a row for this long beyond its batch interval (the host "
            "sends its rows every 5 s, so +6 s) is closed (its remote processes die with "
            "it) and the host reconnected with backoff; the gap is blind time, never "
            "idle."
        ),
    )
    # Probes mostly wait (10 s of dmon sampling each): ~instances x 10 s / probe_interval
    # sessions are needed to probe every instance each interval (bench/README.md, "Burst SSH
    # probe").
    workers: int = Field(
        default=32,
        ge=1,
        le=256,
        description=(
            "Burst mode: parallel SSH sessions at most. A probe spends samples_per_probe "
            "x sample_interval (10 s by default) mostly waiting, so to probe every "
            "instance once per probe_interval you need about instances x 10 s / 60 s "
            "workers: 32 covers ~190 instances; raise it for larger fleets."
        ),
    )
    connect_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="TCP connect timeout."
    )
    banner_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="Wait this long for the SSH server's banner."
    )
    auth_timeout: PositiveDuration = Field(
        default=timedelta(seconds=10), description="SSH authentication timeout."
    )
    command_deadline: PositiveDuration = Field(
        default=timedelta(seconds=45),
        description=(
            "The whole remote command must have finished by this deadline (longer than "
            "samples_per_probe x sample_interval)."
        ),
    )
    samples_per_probe: int = Field(
        default=10, ge=1, le=600, description="Samples per probe (nvidia-smi dmon -c)."
    )
    sample_interval: PositiveDuration = Field(
        default=timedelta(seconds=1),
        description=(
            "Time between samples (nvidia-smi dmon -d): whole seconds, 1s to 60s.\n"
            "(Formerly sample_interval_seconds = 1, still read, with a deprecation note "
            "in `config check`.)"
        ),
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
        description=(
            "An Apprise URL (https://github.com/caronc/apprise) such as "
            '"ntfys://ntfy.sh/TOPIC", "tgram://BOT_TOKEN/CHAT_ID" or "mailtos://...". '
            "URLs embed tokens, so give them by reference. Under the system unit:\n  "
            "LoadCredential=notify_url:/etc/watchdog-gpu/credentials/notify_url\n(the "
            "OnFailure= notifier watchdog-gpu-failed@.service reads the same file)."
        ),
        examples=[{"credential": "notify_url"}],
    )
    severities: list[SeverityName] = Field(
        default_factory=lambda: list(ALL_SEVERITIES),
        min_length=1,
        description='Which messages go here: "info", "warning", "critical".',
    )

    @field_validator("severities")
    @classmethod
    def _unique(cls, value: list[SeverityName]) -> list[SeverityName]:
        if len(set(value)) != len(value):
            raise ValueError("each severity at most once")
        return value


class NotifySection(StrictModel):
    """``[notify]``: delivery of notifications through Apprise."""

    routes: list[NotifyRoute] = Field(
        default_factory=list,
        description=(
            "One [[notify.routes]] table per destination: an Apprise URL and the "
            "severities it receives."
        ),
        examples=[[{"url": {"credential": "notify_url"}}]],
    )
    config: SecretReference | None = Field(
        default=None,
        description=(
            "An Apprise config file (YAML or text, "
            "https://github.com/caronc/apprise/wiki/config) beside or instead of the "
            "routes: a path, or a secret reference to its contents (it holds the "
            'services\' tokens; under the system unit { credential = "apprise_config" }). '
            "Tag each service with the severities it receives: info, warning, critical, "
            "or always (all of them); a service with none of these tags is a "
            "configuration error. YAML:\n  version: 1\n  urls:\n    - "
            "tgram://BOT_TOKEN/CHAT_ID:\n        tag: warning, critical\n    - "
            "mailtos://user:pass@example.com:\n        tag: always\nor text, one "
            '"tags=URL" per line:  warning,critical=tgram://BOT_TOKEN/CHAT_ID'
        ),
        examples=["/etc/watchdog-gpu/apprise.yml"],
    )
    retry_initial: PositiveDuration = Field(
        default=timedelta(seconds=30),
        description=(
            "First retry delay of a failed delivery; delays double up to retry_max. "
            "Failed deliveries stay in the outbox and never block actions."
        ),
    )
    retry_max: PositiveDuration = Field(
        default=timedelta(minutes=30), description="Retry delays double up to this."
    )
    timeout: PositiveDuration = Field(
        default=timedelta(seconds=15), description="Timeout of one delivery attempt."
    )
    digest: DigestConfig = Field(
        default_factory=DigestConfig,
        description=(
            "A short spend report pushed to the routes (what `watchdog-gpu report` shows for "
            "the period): spend per account, the stops and destroys and their estimated "
            "saving. Off by default. One message per period, sent late (once) when the daemon "
            "was not running at the time."
        ),
    )

    @field_validator("config", mode="before")
    @classmethod
    def _a_path_is_a_file(cls, value: object) -> object:
        # A plain string here is the file's path, never the config text itself.
        return {"file": value} if isinstance(value, str) else value


def is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)
