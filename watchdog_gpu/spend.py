"""Spend accounting from the ledger of billed intervals (pure).

:func:`ledger_pieces` turns the ledger the store records (``docs/database.md``, "The ledger of
billed intervals") into billed intervals; :func:`period_spend`, the one definition of period
spend, sums those that fall in a period, so it never decreases inside it. A rate holds until the
next listing, unlisted time bills at the last known rate (estimated), and no rate is unknown
time, never $0: ``docs/safety.md``, "Unknown cost" and "Period spend". Day and month bounds are
computed in a :class:`zoneinfo.ZoneInfo` zone (a DST day is 23 or 25 hours) and returned in UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from watchdog_gpu.fleet import FleetView, InstanceView, VolumeLedger
from watchdog_gpu.model import InstanceState, StateSpan, confirms_kill

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class SpendFigure:
    """Dollars spent, and how many instance-seconds had an unknown cost.

    ``usd`` includes ``estimated_usd``: the part billed at an instance's last known rate after
    its last listing (see the module docstring).
    """

    usd: float = 0.0
    unknown_seconds: float = 0.0
    estimated_usd: float = 0.0

    @property
    def complete(self) -> bool:
        """True when every billed second had a known rate."""
        return self.unknown_seconds == 0

    def __add__(self, other: SpendFigure) -> SpendFigure:
        return SpendFigure(
            self.usd + other.usd,
            self.unknown_seconds + other.unknown_seconds,
            self.estimated_usd + other.estimated_usd,
        )


@dataclass(frozen=True, slots=True)
class RateFigure:
    """A current spend rate: the known dollars per hour and how many billing instances have an
    unknown rate (their cost is not in ``usd_per_hour``)."""

    usd_per_hour: float = 0.0
    unknown_instances: int = 0

    def __add__(self, other: RateFigure) -> RateFigure:
        return RateFigure(
            self.usd_per_hour + other.usd_per_hour,
            self.unknown_instances + other.unknown_instances,
        )


@dataclass(frozen=True, slots=True)
class BillingPiece:
    """``[start, end)`` billed at ``usd_per_hour`` (``None``: unknown). ``estimated``: the time
    after the instance's last listing, billed at its last known rate. ``state``: the instance's
    state it bills in (None: a volume's piece)."""

    start: datetime
    end: datetime
    usd_per_hour: float | None
    estimated: bool = False
    state: InstanceState | None = None


def billing_pieces(
    spans: Sequence[StateSpan], *, until: datetime | None = None
) -> list[BillingPiece]:
    """The stretches of time ``spans`` (oldest first) bill, by the model in the module docstring.

    ``until`` (the end of the period being looked at) adds a final *estimated* piece from the
    last sighting to ``until`` at the last known rate when the instance was last seen in a state
    other than ``gone``; without it the pieces stop at the last span's ``last_seen``.
    """
    pieces: list[BillingPiece] = []
    for index, span in enumerate(spans):
        end = spans[index + 1].first_seen if index + 1 < len(spans) else span.last_seen
        if end > span.first_seen:
            pieces.append(
                BillingPiece(span.first_seen, end, span.billed_usd_per_hour, state=span.state)
            )
    if spans and until is not None and spans[-1].state is not InstanceState.GONE:
        last = spans[-1]
        tail_start = max(last.last_seen, last.first_seen)
        if until > tail_start:
            pieces.append(
                BillingPiece(tail_start, until, last.billed_usd_per_hour, True, last.state)
            )
    return pieces


def _overlap_seconds(piece: BillingPiece, start: datetime, end: datetime) -> float:
    low = max(piece.start, start)
    high = min(piece.end, end)
    return max(0.0, (high - low).total_seconds())


def instance_spend(instance: InstanceView, start: datetime, end: datetime) -> SpendFigure:
    """What ``instance`` billed within ``[start, end]``: its ledger (:func:`view_billing_pieces`,
    the anchor and an accepted call included), as every reader sees it."""
    return pieces_spend(view_billing_pieces(instance, until=end), start, end)


def pieces_spend(pieces: Iterable[BillingPiece], start: datetime, end: datetime) -> SpendFigure:
    """The dollars of ``pieces`` that fall within ``[start, end]`` (each split at the bounds)."""
    usd = 0.0
    unknown = 0.0
    estimated = 0.0
    for piece in pieces:
        seconds = _overlap_seconds(piece, start, end)
        if seconds == 0:
            continue
        if piece.usd_per_hour is None:
            unknown += seconds
            continue
        dollars = piece.usd_per_hour * seconds / SECONDS_PER_HOUR
        usd += dollars
        if piece.estimated:
            estimated += dollars
    return SpendFigure(usd, unknown, estimated)


def view_billing_pieces(instance: InstanceView, *, until: datetime) -> list[BillingPiece]:
    """:func:`billing_pieces` of ``instance``'s spans, preceded by what it billed before its
    first listing: from ``billed_from`` — the provider's start time (Vast.ai's uptime, RunPod's
    runtime uptime or ``lastStartedAt``, a starting pod's rented date) recorded once, at the
    first sighting, never before the account's previous complete listing — to the first
    sighting, at the rate of the first span, counted as estimated. An instance launched while
    its account could not be listed, or before the watchdog ran, was billing all along. The
    anchor is a recorded fact, never recomputed from the latest listing: a stop or a restart
    moves the provider's start time, and the period's spend must not move with it
    (docs/safety.md, "Period spend"). A confirmed stop or destroy ends the bill at the instant
    the provider accepted the call (:func:`spans_at_the_call`)."""
    spans = spans_at_the_call(instance)
    pieces = billing_pieces(spans, until=until)
    started = instance.billed_from
    if (
        started is not None
        and spans
        and spans[0].first_seen == instance.first_seen
        and started < instance.first_seen
    ):
        first = spans[0]
        before = BillingPiece(
            started, instance.first_seen, first.billed_usd_per_hour, True, first.state
        )
        pieces.insert(0, before)
    return pieces


def spans_at_the_call(instance: InstanceView) -> Sequence[StateSpan]:
    """``instance``'s spans, the one that confirms its accepted call (``accepted_call``: gone for
    a destroy, stopped for a stop) starting at the instant the provider accepted it: the provider
    stops billing then, not at the listing that saw it. Only when that span is the first to begin
    after the call and no listing after the call still saw the span before it (a call that did
    not take, repeated later, leaves the spans as they are)."""
    call = instance.accepted_call
    spans = instance.spans
    if call is None:
        return spans
    for index in range(1, len(spans)):
        after = spans[index]
        if after.first_seen <= call.at:
            continue
        # Began at or before the call, unless it is the first span (then seen after it too).
        before = spans[index - 1]
        interruptible = instance.latest.interruptible
        if before.last_seen <= call.at and confirms_kill(
            call.kind, after.state, interruptible=interruptible
        ):
            return (*spans[:index], replace(after, first_seen=call.at), *spans[index + 1 :])
        break
    return spans


def volume_billing_pieces(volume: VolumeLedger, *, until: datetime) -> list[BillingPiece]:
    """What a volume billed, by the instances' model: each rate run bills until the next one
    begins; the last bills until the listing that no longer had the volume (``gone_at``) or,
    while it is not known gone, at its last rate up to ``until`` (estimated after its last
    listing)."""
    pieces: list[BillingPiece] = []
    spans = volume.spans
    for index, span in enumerate(spans):
        if index + 1 < len(spans):
            end = spans[index + 1].first_seen
        elif volume.gone_at is not None:
            end = max(volume.gone_at, span.last_seen)
        else:
            end = span.last_seen
        if end > span.first_seen:
            pieces.append(BillingPiece(span.first_seen, end, span.usd_per_hour))
    if spans and volume.gone_at is None:
        last = spans[-1]
        tail_start = max(last.last_seen, last.first_seen)
        if until > tail_start:
            pieces.append(BillingPiece(tail_start, until, last.usd_per_hour, estimated=True))
    return pieces


def ledger_pieces(
    view: FleetView, *, until: datetime, accounts: Iterable[str] | None = None
) -> list[BillingPiece]:
    """The fleet's billed intervals up to ``until`` — every instance's (its anchor included)
    and every volume's and filesystem's — of ``accounts`` (None: all of them)."""
    wanted = None if accounts is None else frozenset(accounts)
    pieces: list[BillingPiece] = []
    for instance in view.instances.values():
        if wanted is None or instance.latest.account in wanted:
            pieces.extend(view_billing_pieces(instance, until=until))
    for volume in view.volume_ledgers:
        if wanted is None or volume.account in wanted:
            pieces.extend(volume_billing_pieces(volume, until=until))
    return pieces


def period_spend(
    view: FleetView, start: datetime, end: datetime, *, accounts: Iterable[str] | None = None
) -> SpendFigure:
    """What ``accounts`` (None: the whole fleet) billed within ``[start, end]``: the sum of the
    ledger's intervals that fall in it, split at its bounds. The one definition of period spend
    (the budget rule, the metrics and every report read it)."""
    return pieces_spend(ledger_pieces(view, until=end, accounts=accounts), start, end)


def instances_spend(
    instances: Iterable[InstanceView], start: datetime, end: datetime
) -> SpendFigure:
    """What ``instances`` billed within ``[start, end]`` (:func:`view_billing_pieces`)."""
    total = SpendFigure()
    for instance in instances:
        total += instance_spend(instance, start, end)
    return total


def account_spend(view: FleetView, account: str, start: datetime, end: datetime) -> SpendFigure:
    """What ``account`` (its instances and volumes) billed within ``[start, end]``."""
    return period_spend(view, start, end, accounts=(account,))


def provider_spend(view: FleetView, provider: str, start: datetime, end: datetime) -> SpendFigure:
    """What every account of ``provider`` billed within ``[start, end]``."""
    accounts = {i.latest.account for i in view.instances.values() if i.latest.provider == provider}
    accounts.update(name for name, a in view.accounts.items() if a.provider == provider)
    return period_spend(view, start, end, accounts=accounts)


def total_spend(view: FleetView, start: datetime, end: datetime) -> SpendFigure:
    """What the whole fleet billed within ``[start, end]``, across providers."""
    return period_spend(view, start, end)


def volumes_rate(volumes: Iterable[VolumeLedger]) -> RateFigure:
    """The rate volumes bill now: each one not gone at its latest rate."""
    total = RateFigure()
    for volume in volumes:
        if volume.gone_at is not None or not volume.spans:
            continue
        rate = volume.spans[-1].usd_per_hour
        total += RateFigure(0.0, 1) if rate is None else RateFigure(rate, 0)
    return total


def current_rate(instances: Iterable[InstanceView]) -> RateFigure:
    """The rate the instances bill now: each instance's latest billed rate (gone ones bill 0)."""
    total = RateFigure()
    for instance in instances:
        if instance.state is InstanceState.GONE:
            continue
        span = instance.current_span
        rate = span.billed_usd_per_hour if span is not None else None
        if rate is None:
            total += RateFigure(0.0, 1)
        else:
            total += RateFigure(rate, 0)
    return total


def _rate_steps(
    pieces: Iterable[BillingPiece], start: datetime, end: datetime
) -> list[tuple[datetime, datetime, float]]:
    """The summed *known* rate of ``pieces`` as consecutive constant steps over ``[start,
    end]``; unknown rates count as 0."""
    changes: dict[datetime, float] = {}
    for piece in pieces:
        if piece.usd_per_hour is None or piece.usd_per_hour == 0:
            continue
        low, high = max(piece.start, start), min(piece.end, end)
        if high <= low:
            continue
        changes[low] = changes.get(low, 0.0) + piece.usd_per_hour
        changes[high] = changes.get(high, 0.0) - piece.usd_per_hour
    points = sorted({start, end, *changes})
    steps: list[tuple[datetime, datetime, float]] = []
    level = 0.0
    for low, high in pairwise(points):
        level += changes.get(low, 0.0)
        # max(): float rounding of +rate/-rate pairs must not produce a tiny negative rate.
        steps.append((low, high, max(0.0, level)))
    return steps


def spend_crossing_time(
    pieces: Iterable[BillingPiece], start: datetime, end: datetime, amount_usd: float
) -> datetime | None:
    """The first instant in ``[start, end]`` at which the spend of ``pieces`` since ``start``
    (known rates) reached ``amount_usd``; ``None`` if it did not. Deterministic for recorded
    data, so a rule can use it as a stable episode start: the listing that ends an outage does
    not move it (the old rate bills until the next span's first sighting either way)."""
    if amount_usd <= 0:
        return start
    spent = 0.0
    for low, high, rate in _rate_steps(pieces, start, end):
        seconds = (high - low).total_seconds()
        step_usd = rate * seconds / SECONDS_PER_HOUR
        if rate > 0 and spent + step_usd >= amount_usd:
            needed_seconds = (amount_usd - spent) * SECONDS_PER_HOUR / rate
            return low + timedelta(seconds=needed_seconds)
        spent += step_usd
    return None


def rate_exceeded_since(
    pieces: Iterable[BillingPiece],
    end: datetime,
    ceiling_usd_per_hour: float,
    lookback: datetime,
) -> datetime | None:
    """When the summed known rate of ``pieces`` last rose above ``ceiling_usd_per_hour``
    (searching back to ``lookback``); ``None`` when it is not above the ceiling at ``end``.
    Returns ``lookback`` when it has been above the ceiling for the whole lookback."""
    steps = _rate_steps(pieces, lookback, end)
    if not steps or steps[-1][2] <= ceiling_usd_per_hour:
        return None
    since = steps[-1][0]
    for low, _high, rate in reversed(steps):
        if rate <= ceiling_usd_per_hour:
            break
        since = low
    return since


def _zone(zone: ZoneInfo | str) -> ZoneInfo:
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo(zone)


def _local_midnight_utc(day: date, zone: ZoneInfo) -> datetime:
    # A midnight that does not exist (DST starting at 00:00, e.g. America/Santiago) resolves with
    # the offset before the change, which lands on the first instant the day really has.
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def day_start(moment: datetime, zone: ZoneInfo | str) -> datetime:
    """The UTC instant the local day containing ``moment`` began in ``zone``."""
    return _local_midnight_utc(moment.astimezone(_zone(zone)).date(), _zone(zone))


def next_day_start(moment: datetime, zone: ZoneInfo | str) -> datetime:
    """The UTC instant the local day after the one containing ``moment`` begins in ``zone``."""
    tomorrow = moment.astimezone(_zone(zone)).date() + timedelta(days=1)
    return _local_midnight_utc(tomorrow, _zone(zone))


def month_start(moment: datetime, zone: ZoneInfo | str) -> datetime:
    """The UTC instant the local month containing ``moment`` began in ``zone``."""
    return _local_midnight_utc(moment.astimezone(_zone(zone)).date().replace(day=1), _zone(zone))
