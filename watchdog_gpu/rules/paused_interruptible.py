"""paused_interruptible: an interruptible (bid/spot) instance paused for longer than ``after``.

Intent: an outbid Vast interruptible or a preempted RunPod spot pod has lost its GPU but keeps its
disk billing, and nothing resumes it for you. Destroy it once it has been paused for ``after``.

```toml
[rules.paused_interruptible]
after = "30m"
action = "destroy"
warn_before = "10m"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import DestructiveRuleConfig


class PausedInterruptibleConfig(DestructiveRuleConfig):
    after: Duration = Field(
        default=timedelta(minutes=30), description="how long an instance may stay paused"
    )
