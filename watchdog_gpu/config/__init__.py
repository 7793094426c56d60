"""The configuration of watchdog-gpu: one TOML file, ``WATCHDOG_GPU_*`` environment overrides and
secret references (``{ env = ... }``, ``{ file = ... }``, ``{ credential = ... }``).

Modules:
    sections   the models of each TOML table ([watchdog], [metrics], [probe], [rules.*] ...)
    accounts   the [[accounts]] tables and their [accounts.ssh]
    settings   the top-level :class:`Settings` and its sources (file, environment)
    load       finding and loading the file; every problem by its dotted path
    checks     cross-field checks, secret availability (:func:`resolve_secrets`), warnings
    generate   ``config.example.toml`` and ``docs/configuration.md`` from the models' field
               descriptions, defaults and examples (a test fails when they drift)

The names below are loaded on first use (module ``__getattr__``): importing this package, or one
of its sections, does not import pydantic-settings and the loader (a fifth of a second of a
command's start-up) until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from watchdog_gpu.config.accounts import AccountConfig, AccountSshConfig, Provider
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
        MetricsSection,
        Mode,
        NotifyRoute,
        NotifySection,
        ProbeSection,
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

# Where each public name lives.
_HOMES = {
    "NO_ACCOUNTS": "watchdog_gpu.config.checks",
    "config_warnings": "watchdog_gpu.config.checks",
    "cross_check": "watchdog_gpu.config.checks",
    "iter_secret_references": "watchdog_gpu.config.checks",
    "resolve_secrets": "watchdog_gpu.config.checks",
    "CONFIG_ENV_VAR": "watchdog_gpu.config.load",
    "ConfigLocation": "watchdog_gpu.config.load",
    "config_search_path": "watchdog_gpu.config.load",
    "environment_overrides": "watchdog_gpu.config.load",
    "find_config_file": "watchdog_gpu.config.load",
    "format_location": "watchdog_gpu.config.load",
    "load_settings": "watchdog_gpu.config.load",
    "problems_from_validation_error": "watchdog_gpu.config.load",
    "read_toml": "watchdog_gpu.config.load",
    "DEFAULT_METRICS_PORT": "watchdog_gpu.config.sections",
    "AccountConfig": "watchdog_gpu.config.accounts",
    "AccountSshConfig": "watchdog_gpu.config.accounts",
    "MetricsSection": "watchdog_gpu.config.sections",
    "Mode": "watchdog_gpu.config.sections",
    "NotifyRoute": "watchdog_gpu.config.sections",
    "NotifySection": "watchdog_gpu.config.sections",
    "ProbeSection": "watchdog_gpu.config.sections",
    "Provider": "watchdog_gpu.config.accounts",
    "RulesConfig": "watchdog_gpu.config.sections",
    "SeverityName": "watchdog_gpu.config.sections",
    "WatchdogSection": "watchdog_gpu.config.sections",
    "default_database_url": "watchdog_gpu.config.sections",
    "default_state_directory": "watchdog_gpu.config.sections",
    "ENV_PREFIX": "watchdog_gpu.config.settings",
    "Settings": "watchdog_gpu.config.settings",
    "ConfigError": "watchdog_gpu.errors",
    "ConfigProblem": "watchdog_gpu.errors",
    "SafetyConfig": "watchdog_gpu.safety",
    "SecretReference": "watchdog_gpu.secrets",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


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
