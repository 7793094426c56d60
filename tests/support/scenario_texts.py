"""Scenario texts that several daemon tests start from (the format: ``docs/scenario-format.md``)."""

from __future__ import annotations


def one_busy_instance(
    name: str,
    *,
    start: str = "2026-03-02T20:00:00Z",
    duration: str = "1h",
    tick: str = "60s",
    instance_name: str | None = None,
) -> str:
    """One Vast account with $20 and one instance ``9001`` at 95 % GPU from the start: a daemon
    that polls, probes and records, and that must never act on it."""
    named = f'name = "{instance_name}"\n' if instance_name is not None else ""
    return f"""
name = "{name}"
start = "{start}"
duration = "{duration}"
tick = "{tick}"

[[accounts]]
name = "vast-main"
provider = "vast"
balance_usd = 20.0

[[accounts.instances]]
id = "9001"
{named}compute_usd_per_hour = 0.37
events = [{{ at = "0s", state = "running", gpu_util = 95 }}]
"""
