"""budget: spend ceilings per day / month, a balance floor and a $/h ceiling.

Intent: the runaway — 8×H100 launched by mistake, a script looping over instance creation. When a
ceiling is reached every billing, unprotected instance of the scope is destroyed (an emergency:
grace is skipped unless configured), and protected instances that keep billing are reported
critically. Ceilings apply globally (across every provider) and per account; no ceiling is set
unless configured. Days and months are counted in ``timezone``.

```toml
[rules.budget]
daily_usd = 50.0
monthly_usd = 500.0
max_usd_per_hour = 10.0
min_balance_usd = 1.0
timezone = "Europe/Berlin"
skip_grace = true

[rules.budget.accounts.vast-main]
daily_usd = 20.0
```
"""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import DestructiveRuleConfig, StrictModel


class BudgetLimits(StrictModel):
    daily_usd: float | None = Field(
        default=None, gt=0, description="ceiling on spend in the current day"
    )
    monthly_usd: float | None = Field(
        default=None, gt=0, description="ceiling on spend in the current month"
    )
    max_usd_per_hour: float | None = Field(
        default=None, gt=0, description="ceiling on the current spend rate"
    )
    min_balance_usd: float | None = Field(
        default=None, ge=0, description="destroy when the balance falls under this floor"
    )


class BudgetConfig(DestructiveRuleConfig, BudgetLimits):
    timezone: str = Field(default="UTC", description="days and months are counted in this zone")
    skip_grace: bool = Field(
        default=True, description="a budget emergency acts at once, without the warning grace"
    )
    warn_before: Duration = Field(
        default=timedelta(0),
        description="the warning goes out this long before the action (when grace applies)",
    )
    accounts: dict[str, BudgetLimits] = Field(
        default_factory=dict, description="per-account ceilings, keyed by account name"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as error:
            raise ValueError(f"unknown time zone {value!r}") from error
        return value
