"""max_runtime: a hard TTL on how long an instance may run, busy or not.

Intent: the last line of defence when the GPU signal is missing or lies (a hung NCCL job at 100 %).
Off unless configured, because a TTL can kill a busy job.

```toml
[rules.max_runtime]
limit = "48h"
action = "destroy"
warn_before = "1h"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import DestructiveRuleConfig


class MaxRuntimeConfig(DestructiveRuleConfig):
    limit: Duration | None = Field(
        default=None, description="maximum running time; unset = the rule does nothing"
    )
    warn_before: Duration = Field(
        default=timedelta(hours=1), description="the warning goes out this long before the action"
    )
