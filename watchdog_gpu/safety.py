"""The ``[safety]`` configuration: protection, snoozes, the blast-radius fuse and verification.

Pure configuration read by the planner and the executor; lives apart from ``config.py`` so the
decision core can import it without the settings loader.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, field_validator

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import StrictModel


class SafetyConfig(StrictModel):
    protect_ids: list[str] = Field(
        default_factory=list,
        description='instances no rule may stop or destroy, as "account/id" or a bare id',
    )
    protect_names: list[str] = Field(
        default_factory=list,
        description='name/label globs that protect an instance, e.g. "*keep*"',
    )
    protect_accounts: list[str] = Field(
        default_factory=list, description="accounts whose instances are never stopped or destroyed"
    )
    max_snooze: Duration = Field(
        default=timedelta(hours=24), description="the longest snooze `watchdog-gpu snooze` accepts"
    )
    max_actions_per_tick: int = Field(
        default=3, ge=0, description="destructive actions one tick may start (the fuse)"
    )
    max_actions_per_hour: int = Field(
        default=10, ge=0, description="destructive actions in any rolling hour (the fuse)"
    )
    max_fleet_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="largest fraction of the billing fleet one tick may act on (the fuse)",
    )
    budget_emergency_max_actions_per_tick: int = Field(
        default=50,
        ge=0,
        description="the fuse for the budget rule's emergency: it must be able to stop everything",
    )

    @field_validator(
        "max_actions_per_tick", "max_actions_per_hour", "budget_emergency_max_actions_per_tick"
    )
    @classmethod
    def _fuse_allows_one(cls, value: int) -> int:
        # 0 would silently hold every action for ever while the instances keep billing.
        if value < 1:
            raise ValueError(
                "must be at least 1: 0 would hold every stop and destroy for ever while the "
                'instances keep billing; to act on nothing, set [watchdog] mode = "monitor"'
            )
        return value

    verify_interval: Duration = Field(
        default=timedelta(seconds=30), description="how often an unverified kill is re-listed"
    )
    escalate_unverified_after: Duration = Field(
        default=timedelta(minutes=10),
        description="alert critically when a kill is still unverified after this",
    )
