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
        description=(
            'Instances no rule may stop or destroy: "account/id" or a bare id, e.g. '
            '["vast-main/12345678"].'
        ),
    )
    protect_names: list[str] = Field(
        default_factory=list,
        description=(
            'Name/label globs that protect an instance, e.g. ["*keep*", "prod-*"]. A glob '
            'that matches every name ("*") protects unnamed instances too, i.e. '
            "everything: `config check` warns."
        ),
    )
    protect_accounts: list[str] = Field(
        default_factory=list,
        description=(
            'Accounts whose instances are never stopped or destroyed, e.g. ["runpod-lab"].'
        ),
    )
    max_snooze: Duration = Field(
        default=timedelta(hours=24),
        description="The longest snooze `watchdog-gpu snooze ID --for ...` accepts.",
    )
    max_actions_per_tick: int = Field(
        default=3,
        ge=0,
        description=(
            'The blast-radius fuse (docs/safety.md, "Fuse"): beyond these limits due '
            "stops/destroys are deferred to later ticks (one notification); it trips, "
            "alerts critically and waits for a human (`watchdog-gpu fuse reset`) only "
            "when the pattern looks wrong — an idle rule firing on a GPU seen busy a tick "
            "ago, or time/state-based rules wanting more than max_fleet_fraction of the "
            "billing fleet in one tick. Dry runs (monitor mode) never count. The three "
            "limits are at least 1 (0 would hold every action for ever while the "
            'instances bill; use mode = "monitor" instead).\nThis one: destructive '
            "actions one tick may start."
        ),
    )
    max_actions_per_hour: int = Field(
        default=10, ge=0, description="Destructive actions in any rolling hour (the fuse)."
    )
    max_fleet_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Largest fraction of the billing fleet one tick may act on (the fuse).",
    )
    budget_emergency_max_actions_per_tick: int = Field(
        default=50,
        ge=0,
        description=(
            "The budget emergency's own fuse (it must be able to stop everything at once)."
        ),
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
        default=timedelta(seconds=30),
        description=(
            "After a stop/destroy the instance is re-listed every verify_interval until it is gone."
        ),
    )
    escalate_unverified_after: Duration = Field(
        default=timedelta(minutes=10),
        description=(
            "Still unverified after this (since the call, also while listing fails): a "
            "critical alert with the running cost, repeated each time that time doubles."
        ),
    )
