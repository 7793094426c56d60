"""What the blast-radius fuse counts: the outbox actions that touched something, in the last
hour or since an instant, ordinary or the budget emergency's, and the billing fleet its
fraction check compares with. The planner's limits, ``fuse status`` and the metrics read
these one counts (docs/safety.md, "Fuse").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from watchdog_gpu.fleet import ActionRecord, FleetView
from watchdog_gpu.model import ActionStatus, InstanceState

HOUR = timedelta(hours=1)
# Statuses of an outbox action that do not count towards the hourly fuse: nothing was done.
_NOT_ACTED = frozenset({ActionStatus.BLOCKED, ActionStatus.CANCELLED, ActionStatus.HELD})
# Below this many billing instances the fleet-fraction check is not applied (docs/safety.md).
FRACTION_MIN_FLEET = 4


def emergency_rules() -> frozenset[str]:
    """The budget emergency's rules (``RuleSpec.emergency``), from the rules' registry."""
    # Imported on use: ``status --db`` imports the planner but builds no rule's config model.
    from watchdog_gpu.rules.registry import emergency_rules as registered

    return registered()


def acted_in_last_hour(actions: Iterable[ActionRecord], now: datetime) -> int:
    """Ordinary actions that count towards ``max_actions_per_hour``: real (not dry-run),
    not the budget emergency's, and not ended without touching anything. The one count of
    the fuse: ``fuse status`` shows this number."""
    return acted_since(actions, now - HOUR)


def counts_for_fuse(record: ActionRecord) -> bool:
    """Whether an outbox action counts towards the fuse's limits: a real one (never a dry run)
    that did not end without touching anything."""
    return record.status not in _NOT_ACTED and not record.dry_run


def acted_since(
    actions: Iterable[ActionRecord],
    since: datetime,
    *,
    inclusive: bool = False,
    budget: bool = False,
) -> int:
    """Actions that count towards the fuse's limits (:func:`counts_for_fuse`) planned after
    ``since`` (or at it, when ``inclusive``): the ordinary ones, or with ``budget`` the budget
    emergency's."""
    emergency = emergency_rules()
    return sum(
        1
        for record in actions
        if (record.created_at >= since if inclusive else record.created_at > since)
        and counts_for_fuse(record)
        and (record.rule in emergency) == budget
    )


def billing_fleet_size(view: FleetView) -> int:
    """The instances that bill: what ``max_fleet_fraction`` is a fraction of."""
    billing = (
        InstanceState.STARTING,
        InstanceState.RUNNING,
        InstanceState.PAUSED,
        InstanceState.STOPPED,
    )
    return sum(1 for instance in view.instances.values() if instance.state in billing)
