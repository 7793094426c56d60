"""volume_storage: a detached volume or filesystem has billed for more than ``after``.

Intent: network volumes and Lambda filesystems bill on their own after every instance is gone.
Notifies only: a volume holds data, and deleting data is a human decision.

```toml
[rules.volume_storage]
after = "7d"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import RuleConfig


class VolumeStorageConfig(RuleConfig):
    after: Duration = Field(
        default=timedelta(days=7), description="how long a detached volume may bill before alerting"
    )
