"""low_balance: the account balance is low, or the runway (balance ÷ spend rate) is short.

Intent: a prepaid balance running out stops instances on the provider's terms (RunPod deletes
data without a network volume); tell the user while there is time to act. Notifies only.

```toml
[rules.low_balance]
min_balance_usd = 5.0
min_runway_hours = 6
```
"""

from __future__ import annotations

from pydantic import Field

from watchdog_gpu.rules.base import RuleConfig


class LowBalanceConfig(RuleConfig):
    min_balance_usd: float | None = Field(
        default=5.0, ge=0, description="warn when the balance is under this"
    )
    min_runway_hours: float | None = Field(
        default=6.0, gt=0, description="warn when balance ÷ spend rate is under this many hours"
    )
