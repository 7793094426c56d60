"""The configuration of watchdog-gpu: one TOML file, ``WATCHDOG_GPU_*`` environment overrides and
secret references (``{ env = ... }``, ``{ file = ... }``, ``{ credential = ... }``).

Modules:
    sections   the models of each TOML table ([watchdog], [metrics], [[accounts]], [probe] ...)
    settings   the top-level :class:`Settings` and its sources (file, environment)
    load       finding and loading the file; every problem by its dotted path
    checks     cross-field checks, secret availability (:func:`resolve_secrets`), warnings

``config.example.toml`` at the top of the repository documents every option; a test keeps it
and these models in step.
"""

from watchdog_gpu.config.checks import (
    NO_ACCOUNTS,
    config_warnings,
    cross_check,
    iter_secret_references,
    resolve_secrets,
)
from watchdog_gpu.config.load import (
    CONFIG_ENV_VAR,
    ConfigLocation,
    config_search_path,
    environment_overrides,
    find_config_file,
    format_location,
    load_settings,
    problems_from_validation_error,
    read_toml,
)
from watchdog_gpu.config.sections import (
    DEFAULT_METRICS_PORT,
    AccountConfig,
    AccountSshConfig,
    MetricsSection,
    Mode,
    NotifyRoute,
    NotifySection,
    ProbeSection,
    Provider,
    RulesConfig,
    SeverityName,
    WatchdogSection,
    default_database_url,
    default_state_directory,
)
from watchdog_gpu.config.settings import ENV_PREFIX, Settings
from watchdog_gpu.errors import ConfigError, ConfigProblem
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.secrets import SecretReference

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_METRICS_PORT",
    "ENV_PREFIX",
    "NO_ACCOUNTS",
    "AccountConfig",
    "AccountSshConfig",
    "ConfigError",
    "ConfigLocation",
    "ConfigProblem",
    "MetricsSection",
    "Mode",
    "NotifyRoute",
    "NotifySection",
    "ProbeSection",
    "Provider",
    "RulesConfig",
    "SafetyConfig",
    "SecretReference",
    "Settings",
    "SeverityName",
    "WatchdogSection",
    "config_search_path",
    "config_warnings",
    "cross_check",
    "default_database_url",
    "default_state_directory",
    "environment_overrides",
    "find_config_file",
    "format_location",
    "iter_secret_references",
    "load_settings",
    "problems_from_validation_error",
    "read_toml",
    "resolve_secrets",
]
