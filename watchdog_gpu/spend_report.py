"""The spend report's figures (pure): what ``watchdog-gpu report`` and the digest show.

Built from the recorded ledger through its one definition (:mod:`watchdog_gpu.spend`) and the
recorded stop/destroy actions; the command and the digest only format the :class:`Report`.
Rows are per provider and account, per instance and volume, or per UTC day; every action of
the window carries the $/h the instance billed when it was decided, the rate it stopped billing
(that rate less what the next recorded span bills, e.g. a stopped instance's disk) and, for
actions verified done, an *estimated* saving: that stopped rate until the window's end. Each row
and the total also split the GPU-hours and dollars by activity — billed while the GPUs were
observed idle, blind or busy, and dollars billed without a GPU (:mod:`watchdog_gpu.activity`,
from the activity marks the evaluations recorded).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from watchdog_gpu.activity import (
    ActivityFigure,
    ActivitySpan,
    activity_split,
    instance_activity_spans,
    instance_gpus,
)
from watchdog_gpu.fleet import ActionRecord, FleetView, InstanceView
from watchdog_gpu.model import ActionKind, ActionStatus, InstanceState
from watchdog_gpu.spend import (
    SECONDS_PER_HOUR,
    BillingPiece,
    SpendFigure,
    day_start,
    next_day_start,
    period_spend,
    pieces_spend,
    view_billing_pieces,
    volume_billing_pieces,
)

GROUPINGS = ("account", "instance", "day", "rule")
# Actions whose call the provider accepted and a re-listing confirmed: only these stopped billing.
DONE = frozenset({ActionStatus.VERIFIED})


@dataclass(frozen=True)
class SpendRow:
    """One line of spend: its key columns (provider, account, instance/volume or day), its
    figure and its split by activity."""

    key: dict[str, str]
    spend: SpendFigure
    activity: ActivityFigure = field(default_factory=ActivityFigure)


@dataclass(frozen=True)
class ActionLine:
    """One stop/destroy of the window and what it stopped billing."""

    action: ActionRecord
    provider: str
    usd_per_hour_at_call: float | None
    stopped_usd_per_hour: float | None
    estimated_saving_usd: float | None


@dataclass(frozen=True)
class Report:
    start: datetime
    end: datetime
    by: str
    total: SpendFigure
    rows: tuple[SpendRow, ...]
    actions: tuple[ActionLine, ...]
    activity: ActivityFigure = field(default_factory=ActivityFigure)

    @property
    def estimated_saving_usd(self) -> float:
        return sum(line.estimated_saving_usd or 0.0 for line in self.actions)


def build_report(
    view: FleetView,
    actions: Iterable[ActionRecord],
    start: datetime,
    end: datetime,
    by: str = "account",
) -> Report:
    """The report of ``[start, end]``: ``view`` holds the ledger since ``start`` (as of
    ``end``), ``actions`` the actions recorded since ``start``; notifications and actions
    after ``end`` are left out. ``by`` is one of :data:`GROUPINGS`. The activity split reads
    the view's activity marks (``Store.load_fleet_view(..., activity=True)``)."""
    total = period_spend(view, start, end)
    owners = list(_owners(view, end))
    rows = tuple(_rows(view, owners, start, end, by)) if by != "rule" else ()
    lines = tuple(
        _action_line(action, view, end)
        for action in actions
        if action.kind is not ActionKind.NOTIFY and start <= action.created_at <= end
    )
    activity = sum((owner.activity(start, end) for owner in owners), ActivityFigure())
    return Report(start, end, by, total, rows, lines, activity)


@dataclass(frozen=True)
class _Owner:
    """What bills: an instance or a volume, with its billed intervals and, for an instance,
    its GPUs and recorded activity."""

    account: str
    kind: str
    ident: str
    pieces: list[BillingPiece]
    gpus: int = 0
    spans: Sequence[ActivitySpan] = ()

    def spend(self, start: datetime, end: datetime) -> SpendFigure:
        return pieces_spend(self.pieces, start, end)

    def activity(self, start: datetime, end: datetime) -> ActivityFigure:
        return activity_split(self.pieces, self.gpus, self.spans, start, end)


def _owners(view: FleetView, end: datetime) -> Iterator[_Owner]:
    """Every instance and volume of the ledger (:func:`~watchdog_gpu.spend.ledger_pieces`)."""
    for key, instance in view.instances.items():
        latest = instance.latest
        yield _Owner(
            latest.account,
            "instance",
            latest.instance_id,
            view_billing_pieces(instance, until=end),
            instance_gpus(instance),
            instance_activity_spans(instance, view.activity.get(key, ())),
        )
    for volume in view.volume_ledgers:
        pieces = volume_billing_pieces(volume, until=end)
        yield _Owner(volume.account, "volume", volume.volume_id, pieces)


def _provider(view: FleetView, account: str) -> str:
    known = view.accounts.get(account)
    if known is not None:
        return known.provider
    for instance in view.instances.values():
        if instance.latest.account == account:
            return instance.latest.provider
    return ""


def _rows(
    view: FleetView, owners: Sequence[_Owner], start: datetime, end: datetime, by: str
) -> Iterable[SpendRow]:
    if by == "day":
        day = start
        while day < end:
            upto = min(next_day_start(day, "UTC"), end)
            key = {"day": day_start(day, "UTC").date().isoformat()}
            spent = sum((owner.spend(day, upto) for owner in owners), SpendFigure())
            split = sum((owner.activity(day, upto) for owner in owners), ActivityFigure())
            yield SpendRow(key, spent, split)
            day = upto
        return
    figures: dict[tuple[str, ...], tuple[SpendFigure, ActivityFigure]] = {}
    for owner in owners:
        spent = owner.spend(start, end)
        if spent == SpendFigure():
            continue
        group: tuple[str, ...] = (owner.account,)
        if by != "account":
            group = (owner.account, owner.kind, owner.ident)
        had, split = figures.get(group, (SpendFigure(), ActivityFigure()))
        figures[group] = (had + spent, split + owner.activity(start, end))
    for group in sorted(figures):
        key = {"provider": _provider(view, group[0]), "account": group[0]}
        if by == "instance":
            key.update(kind=group[1], id=group[2])
        yield SpendRow(key, *figures[group])


def _action_line(action: ActionRecord, view: FleetView, end: datetime) -> ActionLine:
    provider = _provider(view, action.account)
    instance = next(
        (
            i
            for i in view.instances.values()
            if (i.latest.account, i.latest.instance_id) == (action.account, action.instance_id)
        ),
        None,
    )
    at_call, after = _rates_around(instance, action.created_at)
    if at_call is None:
        at_call = action.usd_per_hour_at_stake
    stopped = None
    if at_call is not None and after is not None:
        stopped = max(0.0, at_call - after)
    saving = None
    if action.status in DONE and not action.dry_run and stopped is not None:
        # From the instant the provider accepted the call (the ledger bills up to it), else the
        # decision: a saving never counts time the ledger billed.
        since = action.accepted_at or action.created_at
        saving = stopped * max(0.0, (end - since).total_seconds()) / SECONDS_PER_HOUR
    return ActionLine(action, provider, at_call, stopped, saving)


def _rates_around(
    instance: InstanceView | None, moment: datetime
) -> tuple[float | None, float | None]:
    """The billed rate of the span covering ``moment`` and of the first later span in another
    state (``None`` when nothing was recorded after it; a gone instance bills 0)."""
    if instance is None or not instance.spans:
        return None, None
    spans = instance.spans
    index = 0
    for position, span in enumerate(spans):
        if span.first_seen <= moment:
            index = position
    current = spans[index]
    for later in spans[index + 1 :]:
        if later.state is not current.state:
            rate = 0.0 if later.state is InstanceState.GONE else later.billed_usd_per_hour
            return current.billed_usd_per_hour, rate
    return current.billed_usd_per_hour, None


def unknown_hours(spent: SpendFigure) -> float:
    """The hours ``spent`` billed at an unknown rate (not in its dollars)."""
    return spent.unknown_seconds / SECONDS_PER_HOUR


def verified_stops(report: Report) -> Sequence[ActionLine]:
    """The report's actions that really stopped billing (verified, not dry runs)."""
    return [
        line for line in report.actions if line.action.status in DONE and not line.action.dry_run
    ]
