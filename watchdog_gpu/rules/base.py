"""What every rule shares: its configuration base classes and the Rule protocol.

A rule is a pure function of a :class:`~watchdog_gpu.fleet.FleetView`, ``now`` and its own config
model; it returns findings with their evidence and never reads the clock or performs I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails

from watchdog_gpu.durations import Duration
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import Finding, InstanceState

if TYPE_CHECKING:
    from watchdog_gpu.rules.idle_clock import IdleEpisode

RuleMode = Literal["inherit", "monitor", "enforce"]
DestructiveAction = Literal["destroy", "stop", "notify"]


class StrictModel(BaseModel):
    """Base of every config model: frozen, and an unknown key is an error (a typo must not be
    silently ignored).

    Durations are written with units (``idle = "30m"``). A model that once took a bare number
    in a unit its key named (``idle_minutes = 30``) lists it in ``LEGACY_DURATIONS`` (old key →
    new key, unit): the old key keeps working, is converted to the new one, and is remembered in
    :attr:`legacy_keys` so ``watchdog-gpu config check`` can note the deprecation.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    LEGACY_DURATIONS: ClassVar[Mapping[str, tuple[str, str]]] = {}
    _legacy_keys: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _accept_legacy_durations(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        used: list[str] = []
        refused: list[InitErrorDetails] = []
        if cls.LEGACY_DURATIONS and isinstance(data, Mapping):
            data = dict(data)
            for old, (new, unit) in cls.LEGACY_DURATIONS.items():
                if old in data:
                    try:
                        data[new] = _legacy_duration(old, new, unit, data.pop(old), new in data)
                    except ValueError as error:
                        refused.append(_value_error(old, error))
                    used.append(old)
        if refused:
            # The rest of the table is still validated: every mistake is listed at once.
            try:
                handler(data)
            except ValidationError as error:
                refused += line_errors(error)
            raise ValidationError.from_exception_data(cls.__name__, refused)
        model = handler(data)
        if used:
            model._legacy_keys = tuple(used)
        return model

    @property
    def legacy_keys(self) -> tuple[str, ...]:
        """The deprecated numeric duration keys this model was written with."""
        return self._legacy_keys


def _value_error(key: str, error: ValueError) -> InitErrorDetails:
    return {"type": "value_error", "loc": (key,), "input": None, "ctx": {"error": error}}


def line_errors(error: ValidationError) -> list[InitErrorDetails]:
    """``error``'s errors in the form a new ``ValidationError`` is built from."""
    found: list[InitErrorDetails] = []
    for detail in error.errors(include_url=False):
        item: InitErrorDetails = {
            "type": detail["type"],
            "loc": detail["loc"],
            "input": detail["input"],
        }
        if "ctx" in detail:
            item["ctx"] = detail["ctx"]
        found.append(item)
    return found


_UNIT_NAMES = {"s": "seconds", "m": "minutes", "h": "hours"}


def _legacy_duration(old: str, new: str, unit: str, value: object, both: bool) -> object:
    """``idle_minutes = 30`` → ``"30m"`` for the ``idle`` field (validated there); ``None``
    (switched off) stays ``None``; a number in a string (an environment variable) is a number."""
    if both:
        raise ValueError(f"{old} and {new} are both set: keep {new} only ({old} is deprecated)")
    if value is None:
        return None
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ValueError(
            f'{old} must be a number of {_UNIT_NAMES[unit]}; better: {new} = "<number>{unit}"'
        )
    if number <= 0:
        raise ValueError(f"{old} must be greater than 0")
    whole = float(number).is_integer()
    return f"{int(number) if whole else float(number)}{unit}"


class SalvageConfig(StrictModel):
    """An optional local command run before a destroy (e.g. rsync results off the instance).

    ``command`` is an argument list; each argument may use the placeholders ``{ssh_host}``,
    ``{ssh_port}``, ``{ssh_user}``, ``{instance_id}``, ``{account}`` and ``{provider}``, filled only
    with validated values (host names/addresses, numbers, ids made of safe characters). The
    command never goes through a shell.
    """

    command: list[str] = Field(
        default_factory=list,
        description=(
            "An argument list (no shell) that may use {ssh_host} {ssh_port} {ssh_user} "
            '{instance_id} {account} {provider}, e.g.\n  ["rsync", "-a", "-e", "ssh -p '
            '{ssh_port}", "{ssh_user}@{ssh_host}:/workspace/results/", '
            '"/srv/results/{instance_id}/"]\nEmpty: no salvage step.'
        ),
    )
    timeout: Duration = Field(
        default=timedelta(minutes=10), description="The command is killed after this."
    )
    on_failure: Literal["hold", "destroy"] = Field(
        default="hold",
        description='"hold" keeps the instance and alerts, "destroy" destroys anyway.',
    )


class RuleConfig(StrictModel):
    """Fields every rule has."""

    enabled: bool = Field(default=True, description="false switches the rule off.")
    mode: RuleMode = Field(
        default="inherit",
        description='"inherit" the [watchdog] mode, or force "monitor" / "enforce" for this rule.',
    )


class DestructiveRuleConfig(RuleConfig):
    """Fields of a rule that can stop or destroy an instance."""

    action: DestructiveAction = Field(
        default="destroy",
        description=(
            '"destroy", "stop" (keeps the disk, which keeps billing) or "notify"; "stop" '
            "is refused (`config check`) while a Lambda account is configured: Lambda "
            "instances can only be terminated."
        ),
    )
    warn_before: Duration = Field(
        default=timedelta(minutes=10),
        description=(
            "The warning (with the command to snooze or protect) goes out this long "
            "before the action."
        ),
    )
    salvage: SalvageConfig = Field(
        default_factory=SalvageConfig,
        description=(
            "An optional command run before a destroy (e.g. rsync results off the instance)."
        ),
    )


class Rule(Protocol):
    """A registered rule: a name, its config model and a pure evaluate function."""

    @property
    def name(self) -> str: ...

    @property
    def config_model(self) -> type[RuleConfig]: ...

    def evaluate(self, view: FleetView, now: datetime, config: RuleConfig) -> Iterable[Finding]:
        """Findings for the fleet as of ``now``; pure."""
        ...

    def cleared_reason(self, finding: Finding, view: FleetView) -> str:
        """Why an episode of this rule ended (its finding is gone), for the resolution."""
        ...

    def evaluate_timed(self, view: FleetView, now: datetime, config: RuleConfig) -> RuleOutcome:
        """The findings and the earliest instant the rule's verdicts may change; pure."""
        ...

    @property
    def observes_idle(self) -> bool:
        """Whether the rule fires only on GPU idleness the probe observed (see RuleSpec)."""
        ...

    @property
    def emergency(self) -> bool:
        """Whether the rule is the budget emergency (see RuleSpec)."""
        ...


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """What one rule found, and ``next_change``: the earliest instant after which one of its
    verdicts may change by the passing of time alone (a GPU's observed idle time reaching the
    warning or the action point), assuming what it sees stays as it is and keeps being observed;
    ``None`` when nothing is timed. The daemon evaluates again then instead of a tick later
    (``docs/architecture.md``, "Wakes"). A hint, never a verdict: an evaluation at any instant is
    safe."""

    findings: tuple[Finding, ...]
    next_change: datetime | None = None
    # The earliest instant a verdict on *listed* state (running since, paused, stopped) may
    # change by time alone, before any finding says so (max_runtime's warning point). Woken at
    # itself with a fresh listing: a wake decides on listed state only from a listing that
    # covers the instant (docs/safety.md, "Warnings").
    next_listed: datetime | None = None
    # idle_gpu only: the running idle episode of each instance whose clock runs, by
    # "account/instance_id" — what the tick records as its activity (activity_marks.py), from the
    # rule's own pass over the samples.
    idle_episodes: Mapping[str, IdleEpisode] | None = None


ConfigT = TypeVar("ConfigT", bound=RuleConfig)


@dataclass(frozen=True, slots=True)
class RuleSpec(Generic[ConfigT]):
    """A :class:`Rule` made of a name, a config model and a typed evaluate function.

    Each rule module ends with ``RULE = RuleSpec(NAME, TheConfig, evaluate)``; the registry in
    ``watchdog_gpu.rules`` lists them.
    """

    name: str
    config_model: type[ConfigT]
    function: Callable[[FleetView, datetime, ConfigT], Iterable[Finding]]
    # Why an episode ended, in the rule's own terms ("GPU busy again"); None: the generic
    # reason (the instance's state now), see :func:`generic_cleared_reason`.
    cleared: Callable[[Finding, FleetView], str] | None = None
    # The findings and the earliest instant a verdict may change (see RuleOutcome), for a rule
    # that can tell; None: ``function``'s findings, no instant.
    timed: Callable[[FleetView, datetime, ConfigT], RuleOutcome] | None = None
    # Fires only on GPU idleness the probe observed: it judges by the streamed rows a wake takes
    # (not by the listing), and a GPU seen busy a tick ago contradicts it (the fuse trips).
    observes_idle: bool = False
    # The budget emergency: its actions have their own per-tick limit in the fuse (not the
    # hourly one), and an instance protected from it is reported critically.
    emergency: bool = False

    def evaluate(self, view: FleetView, now: datetime, config: RuleConfig) -> Iterable[Finding]:
        """Run the rule. Raises TypeError when ``config`` is not this rule's config model."""
        return self.function(view, now, self._own(config))

    def evaluate_timed(self, view: FleetView, now: datetime, config: RuleConfig) -> RuleOutcome:
        """Run the rule, with the earliest instant its verdicts may change when it can tell.
        Raises TypeError when ``config`` is not this rule's config model."""
        own = self._own(config)
        if self.timed is None:
            return RuleOutcome(tuple(self.function(view, now, own)))
        return self.timed(view, now, own)

    def _own(self, config: RuleConfig) -> ConfigT:
        if not isinstance(config, self.config_model):
            raise TypeError(
                f"rule {self.name} needs a {self.config_model.__name__}, "
                f"got {type(config).__name__}"
            )
        return config

    def default_config(self) -> ConfigT:
        """The rule's configuration with every documented default."""
        return self.config_model()

    def cleared_reason(self, finding: Finding, view: FleetView) -> str:
        """Why an episode of this rule ended: the instance is gone or no longer running, else
        the rule's own hook, else a generic reason."""
        generic = generic_cleared_reason(finding, view)
        if generic is not None:
            return generic
        if self.cleared is not None:
            return self.cleared(finding, view)
        if finding.instance_id is None:
            return "condition no longer holds"
        return "instance is running now"


def generic_cleared_reason(finding: Finding, view: FleetView) -> str | None:
    """What any rule would say: the instance is gone or no longer running; None when it still
    runs (the rule's own hook says why its condition cleared) or the finding has no instance."""
    if finding.instance_id is None:
        return None
    instance = view.instances.get(f"{finding.account}/{finding.instance_id}")
    if instance is None or instance.state is InstanceState.GONE:
        return "instance gone"
    if instance.state is not InstanceState.RUNNING:
        return f"instance is {instance.state.value} now"
    return None
