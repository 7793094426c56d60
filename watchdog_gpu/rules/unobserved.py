"""unobserved: a running instance had no usable GPU data for ``after`` (blind time).

Intent: not knowing is a state. When SSH is down or the output cannot be read, the idle rule
cannot act; this rule says so, so the user knows the time-limit and budget layers are what
protects the money now. Notifies only.

```toml
[rules.unobserved]
after = "30m"
```
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from watchdog_gpu.durations import Duration
from watchdog_gpu.rules.base import RuleConfig


class UnobservedConfig(RuleConfig):
    after: Duration = Field(
        default=timedelta(minutes=30), description="blind time before the alert"
    )
