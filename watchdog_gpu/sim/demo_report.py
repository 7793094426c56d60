"""What ``watchdog-gpu demo`` reports before and after the night: who is in the fleet and which
rules apply; then, per instance, what was done and the money spent with and without the
watchdog (:func:`outcomes`, read from the database and the simulated world)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from watchdog_gpu.commands.report import collect
from watchdog_gpu.config import Settings
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.notify.render import format_duration
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.paused_interruptible import PausedInterruptibleConfig
from watchdog_gpu.rules.stopped_disk import StoppedDiskConfig
from watchdog_gpu.sim.phone import PhoneMessage
from watchdog_gpu.sim.scenario import Scenario
from watchdog_gpu.sim.story import clock_text, short_id
from watchdog_gpu.sim.world import SimulatedWorld, cents_with_and_without
from watchdog_gpu.store import Store, create_engine_for, sqlite_url
from watchdog_gpu.store.rows import ActionRow, AuditEvent

RESULT_WORDS = {
    ActionStatus.VERIFIED: "verified",
    ActionStatus.UNVERIFIED: "unverified",
    ActionStatus.CALLED: "unverified",
    ActionStatus.PENDING: "pending",
    ActionStatus.CLAIMED: "pending",
    ActionStatus.FAILED: "failed",
    ActionStatus.DRY_RUN: "dry run",
    ActionStatus.HELD: "held",
    ActionStatus.BLOCKED: "held by the fuse",
    ActionStatus.CANCELLED: "cancelled",
}


@dataclass
class InstanceOutcome:
    """What happened to one instance during the night, and what it cost: ``spend_usd`` and
    ``without_usd`` to the cent (:func:`cents_with_and_without`), ``billed_usd`` and
    ``billed_without_usd`` as billed (the totals are the sums of these, rounded once, as
    ``watchdog-gpu report`` rounds its total)."""

    account: str
    instance_id: str
    name: str
    done: str
    final_state: str
    spend_usd: float
    without_usd: float
    billed_usd: float = 0.0
    billed_without_usd: float = 0.0


@dataclass
class DemoResult:
    """The night as it ended."""

    completed: bool
    ended_at: datetime
    instances: list[InstanceOutcome]
    phone: list[PhoneMessage]
    metrics: list[str]
    scheduler_notes: int
    # What the watchdog's own ledger recorded for the night (``watchdog-gpu report``'s total
    # over the night): it must equal what the simulated providers billed, to the cent.
    ledger_usd: float | None = None

    @property
    def spend_usd(self) -> float:
        return round(sum(item.billed_usd for item in self.instances), 2)

    @property
    def without_usd(self) -> float:
        return round(sum(item.billed_without_usd for item in self.instances), 2)


def outcomes(scenario: Scenario, world: SimulatedWorld, database: Path) -> list[InstanceOutcome]:
    """Per instance: the actions taken (from the outbox), protected reports (from the audit
    log), the final state and the spend with and without the watchdog (from the world)."""
    reader = Store(create_engine_for(sqlite_url(database)))
    try:
        actions = reader.list_actions()
        audit = reader.list_audit_events()
    finally:
        reader.engine.dispose()
    outcomes = []
    for account in scenario.accounts:
        for instance in account.instances:
            done = _done(account.name, instance.id, actions, audit)
            billed = world.spend_usd(account.name, instance.id)
            billed_without = world.spend_without_watchdog_usd(account.name, instance.id)
            spend, without = cents_with_and_without(billed, billed_without)
            outcomes.append(
                InstanceOutcome(
                    account=account.name,
                    instance_id=instance.id,
                    name=instance.name or instance.id,
                    done="; ".join(done) or "never touched",
                    final_state=world.state(account.name, instance.id) or "not created",
                    spend_usd=spend,
                    without_usd=without,
                    billed_usd=billed,
                    billed_without_usd=billed_without,
                )
            )
    return outcomes


def ledger_usd(database: Path, start: datetime, end: datetime) -> float:
    """``watchdog-gpu report``'s total of ``[start, end]`` on ``database`` (the same function)."""
    reader = Store(create_engine_for(sqlite_url(database)))
    try:
        return collect(reader, start, end, "account").total.usd
    finally:
        reader.engine.dispose()


def _done(
    account: str, instance_id: str, actions: Sequence[ActionRow], audit: Sequence[AuditEvent]
) -> list[str]:
    """What was done to one instance: its actions and results, then the rules that reported it
    protected."""
    ref = (account, instance_id)
    done = [
        f"{row.kind.value} {clock_text(row.created_at)} by {row.rule}, "
        + RESULT_WORDS.get(ActionStatus(row.status), str(row.status))
        for row in actions
        if (row.account, row.instance_id) == ref
    ]
    reports = sorted(
        {
            str(event.rule)
            for event in audit
            if event.kind == "protected" and (event.account, event.instance_id) == ref
        }
    )
    if reports:
        done.append(f"protected: reported by {', '.join(reports)}, never touched")
    return done


def print_header(
    scenario: Scenario, settings: Settings, out: TextIO, *, speed: float, database: Path
) -> None:
    """What the demo is, the fleet, the rules, the database."""
    hours = scenario.duration.total_seconds() / 3600
    seconds = scenario.duration.total_seconds() / speed
    out.write(
        f"watchdog-gpu demo: a simulated night of {hours:g} h, played {speed:g}× faster "
        f"(about {seconds:.0f} s)\n\n"
        "The real daemon watches three simulated provider accounts on 127.0.0.1: the provider\n"
        "APIs over HTTP, nvidia-smi over (simulated) SSH, the rules, the planner, the executor,\n"
        "Apprise notifications to a phone on 127.0.0.1, Prometheus metrics. The demo runs in\n"
        f"{settings.watchdog.mode} mode against simulated accounts: nothing real is touched, "
        "no network is used.\n\n"
        f"The fleet at {clock_text(scenario.start)} UTC on {scenario.start:%a %d %b %Y}:\n"
    )
    out.writelines(_fleet_lines(scenario))
    out.write(_rules_text(settings))
    out.write(f"\nDatabase: {database}\nTimes are virtual, UTC.\n\n")
    out.flush()


def _fleet_lines(scenario: Scenario) -> list[str]:
    fleet = [(a, i) for a in scenario.accounts for i in a.instances]
    width = max(len(f"{a.name}/{short_id(i.id)}") for a, i in fleet)
    names = max(len(i.name) for _, i in fleet)
    lines = []
    for account, instance in fleet:
        disk = f" + {instance.disk_gb:g} GB disk" if instance.disk_gb else ""
        bid = " interruptible" if instance.interruptible else ""
        ref = f"{account.name}/{short_id(instance.id)}"
        lines.append(
            f"  {ref:<{width}}  {instance.name:<{names}}  {instance.gpu_count}× "
            f"{instance.gpu_name}{bid}, ${instance.compute_usd_per_hour:.2f}/h{disk}\n"
        )
    return lines


def _rules_text(settings: Settings) -> str:
    rules = settings.rules
    idle, paused = rules.of(IdleGpuConfig), rules.of(PausedInterruptibleConfig)
    stopped = rules.of(StoppedDiskConfig)
    budgets = ", ".join(
        f"{name} ${limits.daily_usd:.2f}/day"
        for name, limits in rules.of(BudgetConfig).accounts.items()
        if limits.daily_usd is not None
    )
    return (
        "\nRules (watchdog_gpu/sim/demo_config.toml, the rest are the documented defaults):\n"
        f"  idle_gpu: destroy after {format_duration(idle.idle)} with every GPU idle, "
        f"warned {format_duration(idle.warn_before)} before\n"
        "  paused_interruptible: destroy after "
        f"{format_duration(paused.after)} paused, warned "
        f"{format_duration(paused.warn_before)} before\n"
        f"  stopped_disk: destroy after {format_duration(stopped.after)} stopped "
        f"(24 h by default), warned {format_duration(stopped.warn_before)} before\n"
        f"  budget: {budgets or 'no ceiling'}; when reached, destroy every billing, "
        "unprotected instance at once\n"
        "  protected: instances named *keep* (watchdog-gpu protect --name '*keep*')\n"
    )


def print_result(
    result: DemoResult, out: TextIO, *, database: Path, program: str = "watchdog-gpu"
) -> None:
    """The table of what was done and the money, then where to look next (``program``: how to
    run watchdog-gpu from the user's shell, e.g. ``.venv/bin/watchdog-gpu``)."""
    state = "the night is over" if result.completed else "the demo was interrupted"
    out.write(f"\n{clock_text(result.ended_at)}  {state}. What the watchdog did:\n\n")
    out.writelines(_outcome_table(result))
    out.write(
        "\n(spent: what the simulated providers billed; without: the same night with nobody "
        "acting)\n"
    )
    if result.ledger_usd is not None:
        out.write(
            f"The watchdog's own ledger (watchdog-gpu report) recorded {_usd(result.ledger_usd)} "
            f"for the night; the providers billed {_usd(result.spend_usd)}.\n"
        )
    out.write(_phone_summary(result.phone))
    if result.metrics:
        out.write("Prometheus counters (GET /metrics) at the end of the night:\n")
        out.writelines(f"  {line}\n" for line in result.metrics)
    if result.scheduler_notes:
        out.write(
            f"{result.scheduler_notes} job runs were skipped because the previous run still "
            "went on (expected when minutes pass in fractions of a second).\n"
        )
    out.write(
        "\nThe database stays for you to look at:\n"
        f"  {program} status --db {shlex.quote(str(database))}\n"
        f"  {program} events --db {shlex.quote(str(database))}\n"
        f"  {program} report --db {shlex.quote(str(database))} --by instance\n"
    )
    out.flush()


def _outcome_table(result: DemoResult) -> list[str]:
    labels = [
        f"{item.account}/{short_id(item.instance_id)} {item.name}" for item in result.instances
    ]
    width = max(len(label) for label in (*labels, "total"))
    lines = [f"  {'instance':<{width}}  {'spent':>8}  {'without':>8}  what happened\n"]
    for label, item in zip(labels, result.instances, strict=True):
        lines.append(
            f"  {label:<{width}}  {_usd(item.spend_usd):>8}  {_usd(item.without_usd):>8}  "
            f"{item.done} [{item.final_state}]\n"
        )
    saved = result.without_usd - result.spend_usd
    lines.append(
        f"  {'total':<{width}}  {_usd(result.spend_usd):>8}  {_usd(result.without_usd):>8}  "
        f"saved {_usd(saved)}\n"
    )
    return lines


def _phone_summary(phone: Sequence[PhoneMessage]) -> str:
    counts: dict[str, int] = {}
    for message in phone:
        counts[message.severity] = counts.get(message.severity, 0) + 1
    summary = ", ".join(f"{count} {severity}" for severity, count in sorted(counts.items()))
    return f"The phone received {len(phone)} messages ({summary or 'none'}).\n"


def _usd(amount: float) -> str:
    return f"-${-amount:.2f}" if amount < 0 else f"${amount:.2f}"
