"""stopped_disk: a stopped instance whose disk keeps billing for longer than ``after``.

Intent: stop is not destroy. A stopped instance bills its disk (RunPod doubles the volume rate);
a few days of a stopped 200 GB disk cost more than the compute it served.

```toml
[rules.stopped_disk]
after = "24h"
action = "destroy"
warn_before = "1h"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import DestructiveRuleConfig


class StoppedDiskConfig(DestructiveRuleConfig):
    after: Duration = Field(
        default=timedelta(hours=24),
        description="how long a stopped instance may keep billing its disk",
    )
    warn_before: Duration = Field(
        default=timedelta(hours=1), description="the warning goes out this long before the action"
    )
