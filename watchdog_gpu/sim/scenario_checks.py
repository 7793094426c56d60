"""Checks of a scenario that span fields: uniqueness, per-provider rules, event contents and
ranges (``docs/scenario-format.md``). Run after the models validated each field alone."""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from typing import TYPE_CHECKING

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.errors import ConfigProblem
from watchdog_gpu.sim.provider_states import PROVIDER_STATES

if TYPE_CHECKING:  # the models import this module to check what they loaded
    from watchdog_gpu.sim.scenario import (
        InstanceEvent,
        Scenario,
        ScenarioAccount,
        ScenarioInstance,
    )


def check_accounts(scenario: Scenario) -> list[ConfigProblem]:
    """Every problem of ``scenario``'s accounts (its duration already checked)."""
    problems: list[ConfigProblem] = []
    names: dict[str, int] = {}
    keys: dict[tuple[str, str], int] = {}
    for index, account in enumerate(scenario.accounts):
        path = f"accounts[{index}]"
        if account.name in names:
            problems.append(
                ConfigProblem(
                    f"{path}.name",
                    f"duplicate account name {account.name!r} "
                    f"(also accounts[{names[account.name]}])",
                )
            )
        names.setdefault(account.name, index)
        key = (account.provider, account.effective_api_key)
        if key in keys:
            problems.append(
                ConfigProblem(
                    f"{path}.api_key",
                    f"same API key as accounts[{keys[key]}] of the same provider",
                )
            )
        keys.setdefault(key, index)
        problems.extend(_check_account(scenario, account, path))
    return problems


def _check_account(scenario: Scenario, account: ScenarioAccount, path: str) -> list[ConfigProblem]:
    return [
        *_check_postpaid(account, path),
        *_check_account_events(scenario, account, path),
        *_check_instances(scenario, account, path),
        *_check_volumes(account, path),
    ]


def _check_postpaid(account: ScenarioAccount, path: str) -> list[ConfigProblem]:
    """Lambda is postpaid: neither the account nor its events may script a balance."""
    if account.provider != "lambda":
        return []
    message = "Lambda is postpaid and has no balance"
    problems: list[ConfigProblem] = []
    if account.balance_usd is not None:
        problems.append(ConfigProblem(f"{path}.balance_usd", message))
    problems += [
        ConfigProblem(f"{path}.events[{number}].balance_usd", message)
        for number, event in enumerate(account.events)
        if event.balance_usd is not None
    ]
    return problems


def _check_account_events(
    scenario: Scenario, account: ScenarioAccount, path: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for number, event in enumerate(account.events):
        event_path = f"{path}.events[{number}]"
        if (
            event.balance_usd is None
            and event.api is None
            and event.spend_limit_usd_per_hour is None
        ):
            problems.append(
                ConfigProblem(
                    event_path,
                    "an account event needs balance_usd, api or spend_limit_usd_per_hour",
                )
            )
        problems.extend(_check_offset(scenario, event.at, f"{event_path}.at"))
    return problems


def _check_instances(
    scenario: Scenario, account: ScenarioAccount, path: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    seen_ids: dict[str, int] = {}
    for number, instance in enumerate(account.instances):
        instance_path = f"{path}.instances[{number}]"
        if instance.id in seen_ids:
            problems.append(
                ConfigProblem(
                    f"{instance_path}.id",
                    f"duplicate instance id {instance.id!r} in this account "
                    f"(also instances[{seen_ids[instance.id]}])",
                )
            )
        seen_ids.setdefault(instance.id, number)
        problems.extend(_check_instance(scenario, account, instance, instance_path))
    return problems


def _check_volumes(account: ScenarioAccount, path: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    volume_ids: set[str] = set()
    for number, volume in enumerate(account.volumes):
        if volume.id in volume_ids:
            problems.append(
                ConfigProblem(f"{path}.volumes[{number}].id", f"duplicate volume id {volume.id!r}")
            )
        volume_ids.add(volume.id)
        if account.provider == "vast" and not volume.id.isdigit():
            problems.append(
                ConfigProblem(f"{path}.volumes[{number}].id", "Vast volume ids are integers")
            )
    return problems


def _check_pod_fields(
    account: ScenarioAccount, instance: ScenarioInstance, path: str
) -> list[ConfigProblem]:
    if account.provider != "vast" and "reserved_discount" in instance.model_fields_set:
        return [ConfigProblem(f"{path}.reserved_discount", "a Vast reserved-instance field")]
    if account.provider != "runpod":
        return [
            ConfigProblem(f"{path}.{name}", "a RunPod pod field")
            for name in ("network_volume", "savings_plan_discount", "serverless_endpoint")
            if name in instance.model_fields_set
        ]
    if instance.network_volume is not None and instance.network_volume not in {
        volume.id for volume in account.volumes
    }:
        return [
            ConfigProblem(f"{path}.network_volume", "not the id of one of the account's volumes")
        ]
    return []


def _check_instance(
    scenario: Scenario, account: ScenarioAccount, instance: ScenarioInstance, path: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    capabilities = CAPABILITIES[account.provider]
    if not capabilities.accepts_instance_id(instance.id):
        # The adapters refuse any other id in a stop/destroy call: such an instance could
        # never be acted on, so the scenario would not test what it means to.
        problems.append(ConfigProblem(f"{path}.id", capabilities.describe_instance_id()))
    if account.provider == "lambda":
        problems += _check_lambda_prices(instance, path)
    problems += _check_pod_fields(account, instance, path)
    problems += _check_ssh_host(instance, path)
    problems += _check_instance_events(scenario, account, instance, path)
    return problems


def _check_lambda_prices(instance: ScenarioInstance, path: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    cents = instance.compute_usd_per_hour * 100
    if abs(cents - round(cents)) > 1e-9:
        problems.append(
            ConfigProblem(
                f"{path}.compute_usd_per_hour",
                "Lambda prices are whole cents per hour (price_cents_per_hour)",
            )
        )
    if instance.storage_usd_per_gb_month > 0:
        problems.append(
            ConfigProblem(
                f"{path}.storage_usd_per_gb_month",
                "Lambda bills no per-instance storage; script a volume (filesystem) instead",
            )
        )
    return problems


def _check_ssh_host(instance: ScenarioInstance, path: str) -> list[ConfigProblem]:
    try:
        ipaddress.ip_address(instance.ssh_host)
    except ValueError:
        if not instance.ssh_host or any(char.isspace() for char in instance.ssh_host):
            return [ConfigProblem(f"{path}.ssh_host", "not a host name or address")]
    return []


def _check_instance_events(
    scenario: Scenario, account: ScenarioAccount, instance: ScenarioInstance, path: str
) -> list[ConfigProblem]:
    """Each event's own problems, then whether the earliest state makes the instance exist."""
    problems: list[ConfigProblem] = []
    first_state: tuple[timedelta, str, str] | None = None
    for number, event in enumerate(instance.events):
        event_path = f"{path}.events[{number}]"
        problems.extend(_check_offset(scenario, event.at, f"{event_path}.at"))
        problems.extend(_check_event(account, instance, event, event_path))
        documented = event.provider_state in PROVIDER_STATES[account.provider]
        scripted = event.state or (documented and "provider_state")
        if scripted and (first_state is None or event.at < first_state[0]):
            first_state = (event.at, scripted, event_path)
    if first_state is None:
        problems.append(
            ConfigProblem(
                f"{path}.events",
                "no event sets a state, so the instance never exists; "
                'add e.g. { at = "0s", state = "running" }',
            )
        )
    elif first_state[1] == "gone":
        problems.append(
            ConfigProblem(
                f"{first_state[2]}.state", "the first state of an instance cannot be 'gone'"
            )
        )
    return problems


def _check_event(
    account: ScenarioAccount, instance: ScenarioInstance, event: InstanceEvent, path: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    if event.model_fields_set <= {"at"}:
        problems.append(
            ConfigProblem(
                path,
                "an instance event needs at least one of state, provider_state, gpu_util, "
                "gpu_pattern, enc, mig, ssh, interactive_login",
            )
        )
    problems += _check_gpu_fields(instance, event, path)
    problems += _check_state(account, instance, event, path)
    problems += _check_provider_state(event, account.provider, path)
    return problems


def _check_gpu_fields(
    instance: ScenarioInstance, event: InstanceEvent, path: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    if event.gpu_util is not None and event.gpu_pattern is not None:
        problems.append(
            ConfigProblem(path, "gpu_util and gpu_pattern exclude each other in one event")
        )
    if isinstance(event.gpu_util, tuple) and len(event.gpu_util) != instance.gpu_count:
        problems.append(
            ConfigProblem(
                f"{path}.gpu_util",
                f"{len(event.gpu_util)} values for {instance.gpu_count} GPU(s); give one per GPU "
                "or a single number for all",
            )
        )
    pattern = event.gpu_pattern
    if pattern is None:
        return problems
    if pattern.period <= timedelta(0):
        problems.append(ConfigProblem(f"{path}.gpu_pattern.period", "must be longer than 0s"))
    elif pattern.busy_for > pattern.period:
        problems.append(
            ConfigProblem(f"{path}.gpu_pattern.busy_for", "must not be longer than the period")
        )
    return problems


def _check_state(
    account: ScenarioAccount, instance: ScenarioInstance, event: InstanceEvent, path: str
) -> list[ConfigProblem]:
    if event.state == "paused" and not instance.interruptible:
        return [
            ConfigProblem(
                f"{path}.state",
                "only an interruptible instance can be paused (preempted); "
                "set interruptible = true or use 'stopped'",
            )
        ]
    if event.state == "stopped" and account.provider == "lambda":
        return [
            ConfigProblem(f"{path}.state", "Lambda instances cannot be stopped, only terminated")
        ]
    return []


def _check_provider_state(event: InstanceEvent, provider: str, path: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    if event.provider_state is not None and event.state is not None:
        problems.append(
            ConfigProblem(f"{path}.provider_state", "state and provider_state exclude each other")
        )
    if event.runtime is not None and (provider != "runpod" or event.provider_state != "RUNNING"):
        problems.append(
            ConfigProblem(
                f"{path}.runtime", 'only a RunPod provider_state = "RUNNING" event takes runtime'
            )
        )
    if event.status_msg is not None and (provider != "vast" or event.provider_state != "stopped"):
        problems.append(
            ConfigProblem(
                f"{path}.status_msg",
                'only a Vast provider_state = "stopped" event takes status_msg',
            )
        )
    return problems


def _check_offset(scenario: Scenario, at: timedelta, path: str) -> list[ConfigProblem]:
    if at > scenario.duration:
        return [ConfigProblem(path, "after the end of the scenario (its duration)")]
    return []
