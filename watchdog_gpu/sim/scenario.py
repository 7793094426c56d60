"""Scenario files: TOML → a frozen, validated :class:`Scenario`.

A scenario scripts a world of provider accounts and instances over time (``docs/scenario-format.md``
is the public contract). :func:`load_scenario` reads a file, :func:`parse_scenario` a string or a
mapping; both collect *every* problem and raise one :class:`~watchdog_gpu.errors.ScenarioError`
whose problems carry dotted paths such as ``accounts[0].instances[1].events[2].at``.

Events may be written in any order: they are sorted by ``at`` (stable, so events at the same
offset keep their file order).
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.durations import Duration
from watchdog_gpu.errors import TOML_TOO_DEEP, ConfigProblem, ScenarioError
from watchdog_gpu.sim.provider_states import PROVIDER_STATES

Provider = Literal["vast", "runpod", "lambda"]
ScriptedState = Literal["starting", "running", "paused", "stopped", "gone"]
ApiMode = Literal[
    "ok", "error500", "timeout", "ratelimit", "malformed", "revoked", "partial", "strict"
]
SshMode = Literal["up", "down", "refused", "hostkey_changed", "garbage"]
# Strict numbers: a quoted "95" or a boolean in a TOML file is a mistake, not a percentage.
# Every figure has a bound far above any real one: beyond it the bills overflow floats and the
# JSON output would carry Infinity or NaN.
Percent = Annotated[int, Field(ge=0, le=100, strict=True)]
MAX_AMOUNT = 1e9
NonNegative = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False, strict=True)]
Money = Annotated[float, Field(ge=-MAX_AMOUNT, le=MAX_AMOUNT, allow_inf_nan=False, strict=True)]

MAX_GPUS = 16
MIN_TICK = timedelta(seconds=1)
# The daemon looks back a day and more from its clock (budgets by the month, retention): a
# scenario lives where those instants exist, and within what Unix timestamps can express.
EARLIEST_START = datetime(1970, 2, 1, tzinfo=UTC)
LATEST_END = datetime(9000, 1, 1, tzinfo=UTC)
_TIME_RANGE = "the scenario must run between 1970-02-01 and 9000-01-01 (UTC)"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class GpuPattern(_Frozen):
    """Bursty use: busy for ``busy_for`` at the start of every ``period``, idle otherwise."""

    period: Duration
    busy_for: Duration
    util: Percent = 90

    def util_at(self, since_pattern_start: timedelta) -> int:
        """The ``sm`` utilisation ``since_pattern_start`` after the pattern began."""
        phase = since_pattern_start % self.period
        return self.util if phase < self.busy_for else 0


class InstanceEvent(_Frozen):
    """One scripted change of one instance at offset ``at`` from the scenario's start."""

    at: Duration
    state: ScriptedState | None = None
    # Additions (docs/scenario-format.md, "Provider states"): the provider's own state, exclusive
    # with ``state``. A documented state of the provider moves the instance into it, with that
    # state's billing; any other string (one no state table maps, e.g. "exploded") is listed
    # as the raw state until the next state event, billing as the scripted state does.
    # ``runtime`` (RunPod) says whether a RUNNING pod shows its runtime block.
    provider_state: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    runtime: bool | None = None
    # Vast, with provider_state = "stopped": Vast stopped it itself (a host fault) and says why.
    status_msg: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    gpu_util: Percent | tuple[Percent, ...] | None = None
    gpu_pattern: GpuPattern | None = None
    enc: Percent | None = None
    mig: bool | None = None
    ssh: SshMode | None = None
    interactive_login: bool | None = None


class AccountEvent(_Frozen):
    """One scripted change of one account at offset ``at``."""

    at: Duration
    balance_usd: Money | None = None
    api: ApiMode | None = None
    spend_limit_usd_per_hour: NonNegative | None = None


class ScenarioInstance(_Frozen):
    """An instance and its script. Rates are the provider's own figures for this instance."""

    id: Annotated[str, Field(min_length=1, max_length=64)]
    name: str = ""
    gpu_name: str = "RTX 4090"
    gpu_count: Annotated[int, Field(ge=1, le=MAX_GPUS, strict=True)] = 1
    interruptible: bool = False
    compute_usd_per_hour: NonNegative
    disk_gb: NonNegative = 0.0
    storage_usd_per_gb_month: NonNegative = 0.0
    stopped_storage_multiplier: NonNegative = 1.0
    # Additions (docs/scenario-format.md): the network volume a RunPod pod uses (the id of one
    # of the account's volumes) and a RunPod Savings Plan discount, as a fraction of the compute
    # price (the pod's adjustedCostPerHr is the price times 1 − discount).
    network_volume: str | None = None
    savings_plan_discount: Annotated[float, Field(ge=0, lt=1, strict=True)] = 0.0
    # A RunPod serverless worker of this endpoint id (its pod shows ``endpointId``).
    serverless_endpoint: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    # An addition (docs/scenario-format.md): a Vast reserved (prepaid) instance's discount, as a
    # fraction of the compute price; Vast charges the discounted rate and lists both
    # (``instance.totalHour`` and ``instance.discountedTotalPerHour``).
    reserved_discount: Annotated[float, Field(ge=0, lt=1, strict=True)] = 0.0
    # Additions to the public format (documented in docs/scenario-format.md): where SSH probes
    # should connect. Defaults to loopback so nothing ever dials an address outside this machine.
    ssh_host: str = "127.0.0.1"
    ssh_port: Annotated[int, Field(ge=1, le=65535, strict=True)] | None = None
    events: tuple[InstanceEvent, ...] = ()


class ScenarioVolume(_Frozen):
    """A separately billed volume / network volume / filesystem (an addition to the format)."""

    id: Annotated[str, Field(min_length=1, max_length=64)]
    name: str = ""
    size_gb: NonNegative
    storage_usd_per_gb_month: NonNegative
    attached: bool = False


class ScenarioSshKey(_Frozen):
    """A public key registered with the account (an addition; read by the hygiene rule)."""

    name: str = "default"
    public_key: str


class ScenarioAccount(_Frozen):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")]
    provider: Provider
    balance_usd: Money | None = None
    # Additions: the API key the simulated servers accept for this account (default
    # "sim-<name>") and the starting provider spend limit (RunPod's default is $80/h).
    api_key: Annotated[str, Field(min_length=1)] | None = None
    spend_limit_usd_per_hour: NonNegative | None = None
    events: tuple[AccountEvent, ...] = ()
    instances: tuple[ScenarioInstance, ...] = ()
    volumes: tuple[ScenarioVolume, ...] = ()
    ssh_keys: tuple[ScenarioSshKey, ...] = ()

    @property
    def effective_api_key(self) -> str:
        return self.api_key if self.api_key is not None else f"sim-{self.name}"


class Scenario(_Frozen):
    """A whole scenario, validated; events of every instance and account sorted by ``at``."""

    name: Annotated[str, Field(min_length=1)]
    start: datetime
    duration: Duration
    tick: Duration = timedelta(seconds=60)
    accounts: tuple[ScenarioAccount, ...] = ()

    @field_validator("start")
    @classmethod
    def _start_is_aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("start needs a timezone, e.g. '2026-03-02T20:00:00Z'")
        value = value.astimezone(UTC)
        if not EARLIEST_START <= value < LATEST_END:
            raise ValueError(_TIME_RANGE)
        return value

    @field_validator("tick")
    @classmethod
    def _tick_moves(cls, value: timedelta) -> timedelta:
        # A tick of 0s would never reach the end of the scenario.
        if value < MIN_TICK:
            raise ValueError(f"must be at least {MIN_TICK.total_seconds():g}s")
        return value

    @property
    def end(self) -> datetime:
        return self.start + self.duration

    def account(self, name: str) -> ScenarioAccount:
        """The account called ``name``; raises ``KeyError`` if there is none."""
        for account in self.accounts:
            if account.name == name:
                return account
        raise KeyError(name)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate the scenario file at ``path``.

    Raises :class:`ScenarioError` for a missing/unreadable file, invalid TOML or any invalid
    value (every problem, each with its dotted path).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError([ConfigProblem("", f"cannot read {file}: {error.strerror}")]) from None
    except UnicodeDecodeError:
        raise ScenarioError([ConfigProblem("", f"{file} is not UTF-8 text")]) from None
    return parse_scenario(text)


def parse_scenario(source: str | Mapping[str, Any]) -> Scenario:
    """Validate a scenario given as TOML text or as an already-parsed mapping."""
    if isinstance(source, str):
        try:
            data: Mapping[str, Any] = tomllib.loads(source)
        except tomllib.TOMLDecodeError as error:
            raise ScenarioError([ConfigProblem("", f"invalid TOML: {error}")]) from None
        except RecursionError:
            raise ScenarioError([ConfigProblem("", f"invalid TOML: {TOML_TOO_DEEP}")]) from None
    else:
        data = source
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_problems_from(error)) from None
    except RecursionError:  # an already-parsed mapping nested beyond any scenario
        raise ScenarioError([ConfigProblem("", TOML_TOO_DEEP)]) from None
    problems = _cross_check(scenario)
    if problems:
        raise ScenarioError(problems)
    return _sorted_events(scenario)


def dotted_path(location: Sequence[int | str]) -> str:
    """``("accounts", 0, "events", 2, "at")`` → ``"accounts[0].events[2].at"``."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _problems_from(error: ValidationError) -> list[ConfigProblem]:
    problems = []
    for item in error.errors(include_url=False):
        # Union members add their type name to the location ("int", "tuple[...]"); drop it so
        # the path names the user's key, not pydantic's internals.
        location = [part for part in item["loc"] if not _is_union_tag(part)]
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see docs/scenario-format.md)"
        problems.append(ConfigProblem(dotted_path(location), message))
    return _first_per_path(problems)


def _is_union_tag(part: int | str) -> bool:
    return isinstance(part, str) and (
        part in {"int", "bool", "float", "str", "constrained-int", "GpuPattern"}
        or part.startswith(("tuple[", "list[", "function-"))
    )


def _first_per_path(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    # A value that fails every member of a union (``gpu_util = 101``) yields one error per
    # member; the first one (the scalar form) is the one people mean.
    # A list that fails on one element also fails the scalar member at the list's own path;
    # the element's error is the useful one.
    deeper = {problem.path.rsplit("[", 1)[0] for problem in problems if problem.path.endswith("]")}
    seen: set[str] = set()
    unique = []
    for problem in problems:
        if problem.path in deeper and not problem.path.endswith("]"):
            continue
        if problem.path not in seen:
            seen.add(problem.path)
            unique.append(problem)
    return unique


def _cross_check(scenario: Scenario) -> list[ConfigProblem]:
    """Checks that span fields: uniqueness, per-provider rules, event contents and ranges."""
    problems: list[ConfigProblem] = []
    if scenario.duration >= LATEST_END - scenario.start:
        problems.append(ConfigProblem("duration", f"too long: {_TIME_RANGE}"))
        return problems  # every offset check below would overflow the end
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
    problems: list[ConfigProblem] = []
    if account.provider == "lambda":
        if account.balance_usd is not None:
            problems.append(
                ConfigProblem(f"{path}.balance_usd", "Lambda is postpaid and has no balance")
            )
        for number, event in enumerate(account.events):
            if event.balance_usd is not None:
                problems.append(
                    ConfigProblem(
                        f"{path}.events[{number}].balance_usd",
                        "Lambda is postpaid and has no balance",
                    )
                )
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
    problems += _check_pod_fields(account, instance, path)
    try:
        ipaddress.ip_address(instance.ssh_host)
    except ValueError:
        if not instance.ssh_host or any(char.isspace() for char in instance.ssh_host):
            problems.append(ConfigProblem(f"{path}.ssh_host", "not a host name or address"))
    first_state = None
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
    if pattern is not None:
        if pattern.period <= timedelta(0):
            problems.append(ConfigProblem(f"{path}.gpu_pattern.period", "must be longer than 0s"))
        elif pattern.busy_for > pattern.period:
            problems.append(
                ConfigProblem(f"{path}.gpu_pattern.busy_for", "must not be longer than the period")
            )
    if event.state == "paused" and not instance.interruptible:
        problems.append(
            ConfigProblem(
                f"{path}.state",
                "only an interruptible instance can be paused (preempted); "
                "set interruptible = true or use 'stopped'",
            )
        )
    if event.state == "stopped" and account.provider == "lambda":
        problems.append(
            ConfigProblem(f"{path}.state", "Lambda instances cannot be stopped, only terminated")
        )
    problems += _check_provider_state(event, account.provider, path)
    return problems


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


def _sorted_events(scenario: Scenario) -> Scenario:
    accounts = []
    for account in scenario.accounts:
        instances = tuple(
            instance.model_copy(
                update={"events": tuple(sorted(instance.events, key=lambda event: event.at))}
            )
            for instance in account.instances
        )
        accounts.append(
            account.model_copy(
                update={
                    "events": tuple(sorted(account.events, key=lambda event: event.at)),
                    "instances": instances,
                }
            )
        )
    return scenario.model_copy(update={"accounts": tuple(accounts)})
