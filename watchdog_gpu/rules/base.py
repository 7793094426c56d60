"""What every rule shares: its configuration base classes and the Rule protocol.

A rule is a pure function of a :class:`~watchdog_gpu.fleet.FleetView`, ``now`` and its own config
model; it returns findings with their evidence and never reads the clock or performs I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import Finding

RuleMode = Literal["inherit", "monitor", "enforce"]
DestructiveAction = Literal["destroy", "stop", "notify"]


class StrictModel(BaseModel):
    """Base of every config model: frozen, and an unknown key is an error (a typo must not be
    silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SalvageConfig(StrictModel):
    """An optional local command run before a destroy (e.g. rsync results off the instance).

    ``command`` is an argument list; each argument may use the placeholders ``{ssh_host}``,
    ``{ssh_port}``, ``{ssh_user}``, ``{instance_id}``, ``{account}`` and ``{provider}``, filled only
    with validated values (host names/addresses, numbers, ids made of safe characters). The
    command never goes through a shell.
    """

    command: list[str] = Field(
        default_factory=list, description="argument list; empty = no salvage step"
    )
    timeout: Duration = Field(
        default=timedelta(minutes=10), description="the command is killed after this"
    )
    on_failure: Literal["hold", "destroy"] = Field(
        default="hold",
        description="hold: keep the instance and alert; destroy: destroy anyway",
    )


class RuleConfig(StrictModel):
    """Fields every rule has."""

    enabled: bool = Field(default=True, description="false: the rule does not run at all")
    mode: RuleMode = Field(
        default="inherit",
        description="inherit the global [watchdog] mode, or force monitor/enforce for this rule",
    )


class DestructiveRuleConfig(RuleConfig):
    """Fields of a rule that can stop or destroy an instance."""

    action: DestructiveAction = Field(
        default="destroy", description="what to do when the limit is reached"
    )
    warn_before: Duration = Field(
        default=timedelta(minutes=10),
        description="the warning goes out this long before the action",
    )
    salvage: SalvageConfig = Field(
        default_factory=SalvageConfig, description="optional command run before a destroy"
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

    def evaluate(self, view: FleetView, now: datetime, config: RuleConfig) -> Iterable[Finding]:
        """Run the rule. Raises TypeError when ``config`` is not this rule's config model."""
        if not isinstance(config, self.config_model):
            raise TypeError(
                f"rule {self.name} needs a {self.config_model.__name__}, "
                f"got {type(config).__name__}"
            )
        return self.function(view, now, config)

    def default_config(self) -> ConfigT:
        """The rule's configuration with every documented default."""
        return self.config_model()
