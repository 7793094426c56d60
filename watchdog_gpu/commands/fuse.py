"""``watchdog-gpu fuse status`` and ``watchdog-gpu fuse reset`` [``--config PATH`` | ``--db PATH``]:
the blast-radius fuse.

When a tick wants more destructive actions than ``[safety]`` allows (per tick, per hour, a
fraction of the fleet) the planner holds them (``blocked``), alerts critically and *latches*:
every later stop/destroy by an ordinary rule is held too until a human looks. ``status`` shows
whether it is tripped, why, the actions it holds and the limits; ``reset`` releases the latch and
cancels the held actions (the next tick re-plans from fresh findings, so nothing stale runs),
with an audit event (``fuse_reset``). The budget emergency is never held by the latch.

Exit codes: 0 (``status`` exits 0 whether tripped or not; ``reset`` of a fuse that is not
tripped changes nothing); 1 database failure; 2 invalid configuration or missing database.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watchdog_gpu.cli import EXIT_OK, doc_paragraph, summary
from watchdog_gpu.commands.common import (
    add_source_arguments,
    current_time,
    json_time,
    opened_source,
    operator_name,
    print_json,
    print_lines,
    ref,
    reports_errors,
    table,
    timestamp,
)
from watchdog_gpu.fuse_count import HOUR, acted_in_last_hour
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.store import AuditEvent, Store
from watchdog_gpu.store.rows import ActionRow
from watchdog_gpu.store.values import FUSE_TRIPPED

if TYPE_CHECKING:
    from watchdog_gpu.safety import SafetyConfig


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fuse status`` and ``fuse reset`` to the command line."""
    description = doc_paragraph(__doc__)
    fuse = subparsers.add_parser("fuse", help=summary("fuse"), description=description)
    actions = fuse.add_subparsers(dest="fuse_action", metavar="{status,reset}", required=True)
    status = actions.add_parser(
        "status",
        help="is the fuse tripped, and what does it hold",
        description="Whether the blast-radius fuse is tripped and why, the destructive "
        "actions it holds and the [safety] limits that trip it (exit 0 either way).",
    )
    add_source_arguments(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=run_status)
    reset = actions.add_parser(
        "reset",
        help="release the fuse after checking the fleet",
        description="Release the latch of a tripped fuse and cancel the actions it held (the "
        "next tick plans again from fresh findings, so nothing stale runs); recorded as a "
        "fuse_reset event. Check the fleet (watchdog-gpu status) first.",
    )
    add_source_arguments(reset)
    reset.set_defaults(handler=run_reset)


@dataclass(frozen=True)
class FuseState:
    """What ``fuse status`` shows: the latch, its last trip, the held actions, the fuse's own
    count of the last hour's destructive actions and the limits."""

    latched: bool
    trip: AuditEvent | None
    held: list[ActionRow]
    acted: int
    safety: SafetyConfig
    from_config: bool


@reports_errors
def run_status(args: argparse.Namespace) -> int:
    """Print the latch, the last trip, the held actions and the limits."""
    with opened_source(args) as source:
        store = source.store
        now = current_time()
        latched = store.fuse_latched()
        # The fuse's own count (dry runs and the budget emergency's are not in it).
        recent = store.list_actions(since=now - HOUR)
        state = FuseState(
            latched=latched,
            trip=last_trip(store) if latched else None,
            held=store.list_actions(statuses=[ActionStatus.BLOCKED]),
            acted=acted_in_last_hour([action.to_record() for action in recent], now),
            safety=source.safety,
            from_config=source.settings is not None,
        )
    if args.json:
        print_json(_status_json(state))
    else:
        print_lines(_status_lines(state))
    return EXIT_OK


def _status_json(state: FuseState) -> dict[str, Any]:
    trip, safety = state.trip, state.safety
    return {
        "tripped": state.latched,
        "tripped_at": json_time(trip.at) if trip is not None else None,
        "why": (trip.message or None) if trip is not None else None,
        "limits": {
            "per_tick": safety.max_actions_per_tick,
            "per_hour": safety.max_actions_per_hour,
            "fleet_fraction": safety.max_fleet_fraction,
            "budget_emergency_per_tick": safety.budget_emergency_max_actions_per_tick,
            "from_config": state.from_config,
        },
        "destructive_actions_last_hour": state.acted,
        "held_actions": [
            {
                "planned_at": json_time(action.created_at),
                "action": action.kind.value,
                "instance": ref(action.account, action.instance_id),
                "rule": action.rule,
                "reason": " ".join(action.reason.split()),
            }
            for action in state.held
        ],
    }


def _status_lines(state: FuseState) -> list[str]:
    safety = state.safety
    limits = (
        f"limits: {safety.max_actions_per_tick} per tick, {safety.max_actions_per_hour} per "
        f"hour, {safety.max_fleet_fraction:.0%} of the billing fleet; budget emergency "
        f"{safety.budget_emergency_max_actions_per_tick} per tick"
    )
    lines = _latch_lines(state)
    lines.append(limits + ("" if state.from_config else " (defaults)"))
    lines.append(f"destructive actions in the last hour (as the fuse counts them): {state.acted}")
    if state.held:
        lines.append(f"held actions ({len(state.held)}):")
        rows = [
            [
                timestamp(action.created_at),
                action.kind.value,
                ref(action.account, action.instance_id),
                action.rule,
                " ".join(action.reason.split()),
            ]
            for action in state.held
        ]
        lines += table(("PLANNED", "ACTION", "INSTANCE", "RULE", "REASON"), rows, indent="  ")
    return lines


def _latch_lines(state: FuseState) -> list[str]:
    if not state.latched:
        return ["fuse: ok (not tripped)"]
    trip = state.trip
    when = f" at {timestamp(trip.at)}" if trip is not None else ""
    lines = [f"fuse: TRIPPED{when}"]
    if trip is not None and trip.message:
        lines.append(f"  why: {trip.message}")
    lines.append(
        "  ordinary rules stop/destroy nothing until a human runs `watchdog-gpu fuse reset`"
    )
    return lines


@reports_errors
def run_reset(args: argparse.Namespace) -> int:
    """Release the latch and cancel the held actions (nothing to do when not tripped)."""
    with opened_source(args) as source:
        store = source.store
        if not store.fuse_latched() and not store.list_actions(statuses=[ActionStatus.BLOCKED]):
            print("the fuse is not tripped: nothing to reset")
            return EXIT_OK
        cancelled = store.reset_fuse(current_time(), who=f"cli:{operator_name()}")
    print(
        f"fuse reset; {cancelled} held action{'s' if cancelled != 1 else ''} cancelled. "
        "The next tick re-plans from fresh findings, within the limits."
    )
    return EXIT_OK


def last_trip(store: Store) -> AuditEvent | None:
    """The most recent ``fuse_tripped`` audit event (the history has no kind filter: the fuse
    trips rarely, so reading the events is acceptable for a command run by hand)."""
    trips = [event for event in store.list_audit_events() if event.kind == FUSE_TRIPPED]
    return trips[-1] if trips else None
