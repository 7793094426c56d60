"""Scenario files: TOML → a frozen, validated :class:`Scenario`.

A scenario scripts a world of provider accounts and instances over time (``docs/scenario-format.md``
is the public contract). :func:`load_scenario` reads a file, :func:`parse_scenario` a string or a
mapping; both collect *every* problem and raise one :class:`~watchdog_gpu.errors.ScenarioError`
whose problems carry dotted paths such as ``accounts[0].instances[1].events[2].at``.

Events may be written in any order: they are sorted by ``at`` (stable, so events at the same
offset keep their file order).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from watchdog_gpu.durations import Duration
from watchdog_gpu.errors import TOML_TOO_DEEP, ConfigProblem, ScenarioError
from watchdog_gpu.sim.scenario_checks import check_accounts

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
    if scenario.duration >= LATEST_END - scenario.start:
        # Every offset check would overflow the end.
        return [ConfigProblem("duration", f"too long: {_TIME_RANGE}")]
    return check_accounts(scenario)


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
