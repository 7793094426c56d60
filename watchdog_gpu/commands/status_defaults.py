"""What ``status`` decides with when no configuration was read (``--db PATH``): the defaults of
the rules, of ``[safety]`` and of the poll interval, as plain values.

The configuration models are pydantic models, most of the command's start-up budget to build
(bench/README.md, "Command-line start-up"); ``status --db`` needs only these few values of
them. ``tests/unit/cli/test_status_defaults.py`` keeps each equal to the models' own defaults, so
changing a default there without changing it here fails.
"""

from __future__ import annotations

from datetime import timedelta
from types import MappingProxyType

from watchdog_gpu.rules.idle_clock import IdleClockSettings

# rules.lookback_for(rules.default_configs()): the samples and probes the fleet view reads.
LOOKBACK = timedelta(hours=1, minutes=13)
# IdleGpuConfig().clock_settings: what the idle clock (idle since) is judged with.
IDLE_CLOCK = IdleClockSettings(
    idle=timedelta(minutes=30),
    arm_after=timedelta(minutes=20),
    threshold_percent=5.0,
    min_coverage=0.8,
    max_sample_gap=timedelta(minutes=3),
)
# The poll interval of a default [watchdog] section (WatchdogSection).
POLL_INTERVAL = timedelta(minutes=1)
# plan.warn_before(rule, …) with every rule's default configuration (a rule not named: 0).
WARN_BEFORE = MappingProxyType(
    {
        "idle_gpu": timedelta(minutes=10),
        "paused_interruptible": timedelta(minutes=10),
        "stopped_disk": timedelta(hours=1),
        "max_runtime": timedelta(hours=1),
    }
)
# SafetyConfig() protects nothing (no protect_ids, protect_names or protect_accounts), and no
# account is protected without a configuration: only the database's protections apply.
