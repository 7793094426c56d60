"""idle_gpu: every GPU of a running instance idle for ``idle_minutes``.

Intent: end the forgotten instance, the job that finished at 1 a.m. The window must be covered by
real samples (``min_coverage``): missing data is blind time, never idle. The rule arms only after
the instance showed GPU activity once, or ``arm_after`` after it started running, so a job that
spends its first half hour loading data is not killed.

```toml
[rules.idle_gpu]
idle_minutes = 30
arm_after = "20m"
threshold_percent = 5
min_coverage = 0.8
action = "destroy"
warn_before = "10m"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import DestructiveRuleConfig


class IdleGpuConfig(DestructiveRuleConfig):
    idle_minutes: int = Field(
        default=30, gt=0, description="minutes every GPU must be idle before the action"
    )
    arm_after: Duration = Field(
        default=timedelta(minutes=20),
        description="arm this long after the instance started running, even without activity",
    )
    threshold_percent: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="a GPU is busy when sm/enc/dec/jpg/ofa exceed this percentage",
    )
    min_coverage: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="fraction of the idle window real samples must cover; less is blind time",
    )
