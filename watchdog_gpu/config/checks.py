"""Checks beyond single fields: cross references, secrets that must be available, warnings.

Each returns a list of :class:`~watchdog_gpu.errors.ConfigProblem` with a dotted path, so the
callers can show every problem at once.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING

from pydantic import BaseModel

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.durations import format_duration
from watchdog_gpu.errors import ConfigProblem
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.secrets import SecretReference, warn_if_exposed

if TYPE_CHECKING:
    from watchdog_gpu.config.settings import Settings


# `watchdog-gpu run` refuses a configuration without accounts; `config check` says so.
NO_ACCOUNTS = ConfigProblem(
    "accounts",
    "no [[accounts]] configured: the daemon would watch nothing (add one table per provider "
    "account, see config.example.toml)",
)


def duplicate_account_problems(names: Sequence[object]) -> list[ConfigProblem]:
    """One problem for every account whose name an earlier account already uses."""
    first_index: dict[str, int] = {}
    problems = []
    for index, name in enumerate(names):
        if not isinstance(name, str):
            continue
        if name in first_index:
            problems.append(
                ConfigProblem(
                    f"accounts[{index}].name",
                    f"duplicate account name {name!r} (accounts[{first_index[name]}] has it)",
                )
            )
        else:
            first_index[name] = index
    return problems


def cross_check(settings: Settings) -> list[ConfigProblem]:
    """Problems between fields of otherwise valid settings: duplicate or unknown account names,
    a probe deadline shorter than its sampling, retry delays in the wrong order, and a sample
    retention too short for the idle window."""
    problems = duplicate_account_problems([account.name for account in settings.accounts])
    problems += _unknown_account_references(settings)
    problems += actions_providers_cannot_take(settings)
    probe = settings.probe
    sampling = probe.samples_per_probe * probe.sample_interval
    if probe.command_deadline <= sampling:
        problems.append(
            ConfigProblem(
                "probe.command_deadline",
                f"must be longer than samples_per_probe x sample_interval ({sampling})",
            )
        )
    if settings.notify.retry_initial > settings.notify.retry_max:
        problems.append(ConfigProblem("notify.retry_initial", "must not exceed retry_max"))
    idle_window = settings.rules.of(IdleGpuConfig).idle
    if settings.watchdog.sample_retention < idle_window:
        problems.append(
            ConfigProblem(
                "watchdog.sample_retention",
                "must be at least rules.idle_gpu.idle (idle windows are computed from "
                "stored samples)",
            )
        )
    return problems


def actions_providers_cannot_take(settings: Settings) -> list[ConfigProblem]:
    """``action = "stop"`` on an enabled rule while an account's provider cannot stop (Lambda):
    the stop would fail every tick while the instance bills (docs/providers.md)."""
    cannot_stop = [
        account for account in settings.accounts if not CAPABILITIES[account.provider].can_stop
    ]
    if not cannot_stop:
        return []
    problems = []
    for rule_name, rule in settings.rules.by_name().items():
        if getattr(rule, "action", None) != "stop" or not getattr(rule, "enabled", True):
            continue
        names = ", ".join(repr(account.name) for account in cannot_stop)
        providers = sorted({CAPABILITIES[a.provider].display_name for a in cannot_stop})
        problems.append(
            ConfigProblem(
                f"rules.{rule_name}.action",
                f'"stop" is not possible on {" / ".join(providers)} (account {names}): its '
                'instances can only be terminated; use action = "destroy"',
            )
        )
    return problems


def _unknown_account_references(settings: Settings) -> list[ConfigProblem]:
    # A misspelt account in protect_accounts would leave that account unprotected: an error.
    known = {account.name for account in settings.accounts}
    problems = [
        ConfigProblem(f"rules.budget.accounts.{name}", f"no account is named {name!r}")
        for name in settings.rules.of(BudgetConfig).accounts
        if name not in known
    ]
    for index, name in enumerate(settings.safety.protect_accounts):
        if name not in known:
            problems.append(
                ConfigProblem(f"safety.protect_accounts[{index}]", f"no account is named {name!r}")
            )
    for index, entry in enumerate(settings.safety.protect_ids):
        account, slash, _ = entry.partition("/")
        if slash and account not in known:
            problems.append(
                ConfigProblem(
                    f"safety.protect_ids[{index}]",
                    f"no account is named {account!r} (write 'account/id' or a bare id)",
                )
            )
    return problems


def iter_secret_references(
    model: BaseModel, prefix: str = ""
) -> Iterator[tuple[str, SecretReference]]:
    """Every secret reference in ``model`` (recursively) with its dotted path."""
    for name, value in model:  # fields and extras (the rule tables of [rules])
        yield from _walk(value, f"{prefix}.{name}" if prefix else name)


def _walk(value: object, path: str) -> Iterator[tuple[str, SecretReference]]:
    if isinstance(value, SecretReference):
        yield path, value
    elif isinstance(value, BaseModel):
        yield from iter_secret_references(value, path)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}")


def resolve_secrets(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> list[ConfigProblem]:
    """Look up every configured secret (and SSH key file) now; one problem per secret that is
    missing, empty or unreadable. ``run`` refuses to start unless this is empty; ``config check``
    only reports the problems. Found values are registered for log redaction."""
    env = os.environ if environ is None else environ
    problems = []
    for path, reference in iter_secret_references(settings):
        status = reference.lookup(env)
        if status.value is None:
            problems.append(
                ConfigProblem(path, f"secret not available: {reference.source} ({status.detail})")
            )
    for index, account in enumerate(settings.accounts):
        key_file = account.ssh.key_file
        if key_file is not None and not os.access(key_file, os.R_OK):
            reason = "missing" if not key_file.exists() else "not readable"
            problems.append(
                ConfigProblem(f"accounts[{index}].ssh.key_file", f"{key_file} is {reason}")
            )
        elif key_file is not None:
            with suppress(OSError):  # gone since: the SSH runner reports it
                warn_if_exposed(key_file, key_file.stat().st_mode)  # logged once, with the fix
    return problems


def config_warnings(settings: Settings) -> list[ConfigProblem]:
    """Valid but risky choices ``config check`` points out: secrets in plain text, nothing to
    watch (``run`` refuses that), deprecated keys, nowhere to send alerts, an exposed metrics
    endpoint, accounts the probe cannot log in to."""
    warnings = [
        ConfigProblem(
            path,
            "stored in plain text in the config file; prefer { env = ... }, { file = ... } or "
            "{ credential = ... }",
        )
        for path, reference in iter_secret_references(settings)
        if reference.is_plain_text
    ]
    if not settings.accounts:
        warnings.append(NO_ACCOUNTS)
    warnings += deprecated_keys(settings)
    warnings += defeating_settings(settings)
    if not settings.notify.routes and settings.notify.config is None:
        warnings.append(
            ConfigProblem(
                "notify.routes", "no routes and no config: warnings and actions are only logged"
            )
        )
    if settings.metrics.enabled and not _is_loopback(settings.metrics.listen_address):
        warnings.append(
            ConfigProblem(
                "metrics.listen_address",
                "not a loopback address: anyone who can reach it reads your fleet and spend",
            )
        )
    warnings += evidence_warnings(settings)
    return warnings


def evidence_warnings(settings: Settings) -> list[ConfigProblem]:
    """Accounts whose GPUs the probe cannot see, and accounts that let a provider's reading
    prove idle, each with what its evidence can prove (``Settings.evidence``, the same text
    ``doctor`` and ``status`` print and the rules act by)."""
    evidence = settings.evidence()
    warnings = []
    for index, account in enumerate(settings.accounts):
        item = evidence[account.name]
        if settings.probe.enabled and not account.ssh.has_authentication:
            warnings.append(
                ConfigProblem(
                    f"accounts[{index}].ssh",
                    f"no key_file, private_key or use_agent: the GPU probe cannot log in; "
                    f"{item.summary}",
                )
            )
        elif not settings.probe.enabled and not item.reading_proves_idle:
            warnings.append(
                ConfigProblem("probe.enabled", f"account {account.name!r}: {item.summary}")
            )
        if account.idle_evidence == "provider_api":
            display = CAPABILITIES[account.provider].display_name
            text = (
                f"{item.summary}"
                if item.reading_proves_idle
                else f"has no effect: {display}'s API reports no GPU utilisation"
            )
            warnings.append(ConfigProblem(f"accounts[{index}].idle_evidence", text))
    return warnings


def defeating_settings(settings: Settings) -> list[ConfigProblem]:
    """Valid settings that switch a protection or a rule off without saying so: a name glob
    that protects every instance, a sample gap shorter than the probe interval."""
    from watchdog_gpu.protection import glob_protects_everything

    warnings = [
        ConfigProblem(
            f"safety.protect_names[{index}]",
            f"{pattern!r} matches every instance, named or not: no rule will ever stop or "
            "destroy anything (only warnings are sent)",
        )
        for index, pattern in enumerate(settings.safety.protect_names)
        if glob_protects_everything(pattern)
    ]
    idle = settings.rules.of(IdleGpuConfig)
    interval = settings.watchdog.probe_interval
    if idle.enabled and idle.max_sample_gap < interval:
        warnings.append(
            ConfigProblem(
                "rules.idle_gpu.max_sample_gap",
                f"shorter than watchdog.probe_interval ({format_duration(interval)}): samples "
                "of the burst probe and the provider's readings come that far apart, so every "
                "gap between them is blind and idle_gpu never finds those GPUs idle (keep it "
                "about twice the probe interval)",
            )
        )
    return warnings


def deprecated_keys(settings: Settings) -> list[ConfigProblem]:
    """The numeric duration keys still written the old way (``idle_minutes = 30``), each with
    the key and value to write instead (see ``StrictModel.LEGACY_DURATIONS``)."""
    from watchdog_gpu.durations import format_duration
    from watchdog_gpu.rules.base import StrictModel

    found: list[ConfigProblem] = []

    def walk(model: BaseModel, path: str) -> None:
        if isinstance(model, StrictModel):
            for old in model.legacy_keys:
                new = type(model).LEGACY_DURATIONS[old][0]
                value = getattr(model, new)
                found.append(
                    ConfigProblem(
                        f"{path}.{old}",
                        f'deprecated: write {new} = "{format_duration(value)}" (durations take '
                        "a unit everywhere); the old key still works",
                    )
                )
        for name, child in model:  # fields and extras (the rule tables of [rules])
            if isinstance(child, BaseModel):
                walk(child, f"{path}.{name}" if path else name)

    walk(settings, "")
    return found


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
