"""Spend accounting: integrating billed $/h over recorded spans, unknown cost, day/month bounds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.rules.builders import at, fleet, instance, running, span
from watchdog_gpu.activity import activity_split
from watchdog_gpu.fleet import AcceptedCall, InstanceView, RatedSpan, VolumeLedger
from watchdog_gpu.model import ActionKind, InstanceState
from watchdog_gpu.spend import (
    BillingPiece,
    SpendFigure,
    account_spend,
    billing_pieces,
    current_rate,
    day_start,
    instance_spend,
    instances_spend,
    ledger_pieces,
    month_start,
    next_day_start,
    period_spend,
    pieces_spend,
    provider_spend,
    rate_exceeded_since,
    spend_crossing_time,
    total_spend,
    view_billing_pieces,
)

RUNNING = InstanceState.RUNNING
STOPPED = InstanceState.STOPPED
GONE = InstanceState.GONE
UNKNOWN = InstanceState.UNKNOWN


def test_a_running_span_bills_compute_plus_storage_for_its_time() -> None:
    spans = [span(RUNNING, at(0), at(120), compute=0.5, storage=0.1)]
    figure = instance_spend(instance(*spans), at(0), at(120))
    assert figure.usd == pytest.approx(1.2)
    assert figure.complete


def test_the_spend_is_clipped_to_the_period() -> None:
    spans = [span(RUNNING, at(0), at(120), compute=1.0, storage=0.0)]
    assert instance_spend(instance(*spans), at(30), at(60)).usd == pytest.approx(0.5)
    assert instance_spend(instance(*spans), at(-60), at(0)).usd == 0.0


def test_a_span_bills_until_the_next_span_was_first_seen() -> None:
    # Last seen running at 60, first seen stopped at 62: the two minutes in between are charged
    # at the running rate, the last rate known.
    spans = [
        span(RUNNING, at(0), at(60), compute=0.6, storage=0.0),
        span(STOPPED, at(62), at(122), compute=0.6, storage=0.06),
    ]
    figure = instance_spend(instance(*spans), at(0), at(122))
    assert figure.usd == pytest.approx(0.6 * 62 / 60 + 0.06 * 1.0)
    assert figure.complete


def test_the_last_span_keeps_billing_its_last_known_rate_after_its_last_sighting() -> None:
    # Not listed since 60 (an outage): the last known rate keeps accruing, as an estimate.
    spans = [span(RUNNING, at(0), at(60), compute=1.0, storage=0.0)]
    figure = instance_spend(instance(*spans), at(0), at(90))
    assert figure.usd == pytest.approx(1.5)
    assert figure.estimated_usd == pytest.approx(0.5)
    assert figure.complete


def test_an_instance_last_seen_gone_has_no_estimated_tail() -> None:
    spans = [
        span(RUNNING, at(0), at(60), compute=1.0, storage=0.0),
        span(GONE, at(61), at(61)),
    ]
    figure = instance_spend(instance(*spans), at(0), at(600))
    assert figure.usd == pytest.approx(61 / 60)
    assert figure.estimated_usd == 0
    assert figure.complete


def test_an_unknown_last_rate_is_unknown_time_after_the_last_sighting() -> None:
    spans = [
        span(RUNNING, at(0), at(60), compute=1.0, storage=0.0),
        span(UNKNOWN, at(60), at(90), compute=1.0, storage=0.0),
    ]
    figure = instance_spend(instance(*spans), at(0), at(120))
    assert figure.usd == pytest.approx(1.0)
    assert figure.unknown_seconds == pytest.approx(60 * 60)
    assert figure.estimated_usd == 0


def test_the_listing_after_an_outage_keeps_the_estimate_of_the_outage() -> None:
    # Seen running until 60, listed again at 120 as stopped: the stretch 60..120 was estimated
    # at the running rate, and stays billed at it once the listing says otherwise.
    during = [span(RUNNING, at(0), at(60), compute=1.0, storage=0.0)]
    after = [*during, span(STOPPED, at(120), at(150), compute=1.0, storage=0.1)]
    assert instance_spend(instance(*during), at(0), at(120)).usd == pytest.approx(2.0)
    figure = instance_spend(instance(*after), at(0), at(150))
    assert figure.usd == pytest.approx(2.0 + 0.1 * 0.5)
    assert figure.estimated_usd == 0
    assert spend_crossing_time(pieces(at(120), instance(*during)), at(0), at(120), 1.5) == at(90)
    assert spend_crossing_time(pieces(at(150), instance(*after)), at(0), at(150), 1.5) == at(90)


@pytest.mark.parametrize(
    ("state", "compute", "storage"),
    [
        (UNKNOWN, 0.5, 0.02),  # an unmapped state bills an unknown amount
        (RUNNING, None, 0.02),  # no compute price
        (STOPPED, 0.5, None),  # no storage price
    ],
)
def test_an_unknown_rate_is_unknown_time_not_zero_dollars(
    state: InstanceState, compute: float | None, storage: float | None
) -> None:
    spans = [
        span(RUNNING, at(0), at(60), compute=1.0, storage=0.0),
        span(state, at(60), at(120), compute=compute, storage=storage),
    ]
    figure = instance_spend(instance(*spans), at(0), at(120))
    assert figure.usd == pytest.approx(1.0)
    assert figure.unknown_seconds == pytest.approx(3600)
    assert not figure.complete


def test_spend_figures_add_up_dollars_and_unknown_time() -> None:
    total = SpendFigure(1.0, 10) + SpendFigure(2.5, 0)
    assert total == SpendFigure(3.5, 10)


def test_account_provider_and_total_spend_across_two_providers() -> None:
    vast = running(at(0), at(60), compute=1.0, storage=0.0, instance_id="1", account="vast-a")
    runpod_a = running(
        at(0), at(60), compute=2.0, storage=0.0, instance_id="2", account="rp-a", provider="runpod"
    )
    runpod_b = running(
        at(30), at(60), compute=4.0, storage=0.0, instance_id="3", account="rp-b", provider="runpod"
    )
    view = fleet(at(60), vast, runpod_a, runpod_b)
    assert account_spend(view, "vast-a", at(0), at(60)).usd == pytest.approx(1.0)
    assert account_spend(view, "rp-b", at(0), at(60)).usd == pytest.approx(2.0)
    assert provider_spend(view, "runpod", at(0), at(60)).usd == pytest.approx(4.0)
    assert total_spend(view, at(0), at(60)).usd == pytest.approx(5.0)


def test_the_current_rate_sums_billing_instances_and_counts_unknown_ones() -> None:
    billing = running(at(0), at(10), compute=1.0, storage=0.5, instance_id="1")
    stopped = instance(span(STOPPED, at(0), at(10), storage=0.25), instance_id="2")
    gone = instance(span(GONE, at(0), at(10)), instance_id="3")
    unknown = instance(span(UNKNOWN, at(0), at(10)), instance_id="4")
    rate = current_rate([billing, stopped, gone, unknown])
    assert rate.usd_per_hour == pytest.approx(1.75)
    assert rate.unknown_instances == 1


def test_the_crossing_time_is_when_cumulative_spend_reached_the_amount() -> None:
    one = running(at(0), at(120), compute=1.0, storage=0.0, instance_id="1")
    two = running(at(60), at(120), compute=2.0, storage=0.0, instance_id="2")
    # $1 in the first hour, then $3/h: $2 is reached 20 minutes into the second hour.
    assert spend_crossing_time(pieces(at(120), one, two), at(0), at(120), 2.0) == at(80)
    assert spend_crossing_time(pieces(at(120), one, two), at(0), at(120), 10.0) is None


def test_the_rate_ceiling_was_exceeded_since_the_instance_that_tipped_it() -> None:
    one = running(at(0), at(120), compute=3.0, storage=0.0, instance_id="1")
    two = running(at(50), at(120), compute=3.0, storage=0.0, instance_id="2")
    assert rate_exceeded_since(pieces(at(125), one, two), at(125), 5.0, at(-600)) == at(50)
    assert rate_exceeded_since(pieces(at(125), one, two), at(125), 7.0, at(-600)) is None


@pytest.mark.parametrize(
    ("moment", "zone", "expected_start", "expected_hours"),
    [
        # Berlin is UTC+1 in winter: the local day of 23:30 UTC on 2 March is 3 March.
        (datetime(2026, 3, 2, 23, 30, tzinfo=UTC), "Europe/Berlin", (2026, 3, 2, 23), 24),
        (datetime(2026, 3, 2, 22, 30, tzinfo=UTC), "Europe/Berlin", (2026, 3, 1, 23), 24),
        # Spring forward on 29 March 2026: a 23-hour day; fall back on 25 October: 25 hours.
        (datetime(2026, 3, 29, 12, 0, tzinfo=UTC), "Europe/Berlin", (2026, 3, 28, 23), 23),
        (datetime(2026, 10, 25, 12, 0, tzinfo=UTC), "Europe/Berlin", (2026, 10, 24, 22), 25),
        # Santiago starts DST at midnight (6 Sep 2026): 00:00 does not exist, the day starts at
        # 01:00 -03.
        (datetime(2026, 9, 6, 16, 0, tzinfo=UTC), "America/Santiago", (2026, 9, 6, 4), 23),
        (datetime(2026, 3, 2, 0, 0, tzinfo=UTC), "UTC", (2026, 3, 2, 0), 24),
    ],
)
def test_day_boundaries_follow_the_local_wall_clock(
    moment: datetime, zone: str, expected_start: tuple[int, int, int, int], expected_hours: int
) -> None:
    start = day_start(moment, zone)
    assert start == datetime(*expected_start, tzinfo=UTC)
    assert next_day_start(moment, zone) - start == timedelta(hours=expected_hours)


def test_the_month_starts_at_local_midnight_of_the_first() -> None:
    assert month_start(datetime(2026, 3, 31, 23, 30, tzinfo=UTC), "Europe/Berlin") == datetime(
        2026, 3, 31, 22, 0, tzinfo=UTC
    )
    assert month_start(datetime(2026, 3, 31, 21, 30, tzinfo=UTC), "Europe/Berlin") == datetime(
        2026, 2, 28, 23, 0, tzinfo=UTC
    )


def test_a_provider_dated_start_before_the_first_listing_is_billed_as_an_estimate() -> None:
    # Launched at 0 while its account could not be listed; first listed at 60, running at
    # $1/h: the budget counts the hour before the first sighting (the provider says it ran).
    view = running(at(60), at(90), compute=1.0, storage=0.0, billed_from=at(0))
    figure = instances_spend([view], at(0), at(90))
    assert figure.usd == pytest.approx(1.5)
    assert figure.estimated_usd == pytest.approx(1.0)
    assert total_spend(fleet(at(90), view), at(30), at(90)).usd == pytest.approx(1.0)
    # The spend crossed $0.50 half an hour after the launch, before anyone saw the instance.
    assert spend_crossing_time(pieces(at(90), view), at(0), at(90), 0.5) == at(30)


def test_the_anchor_is_the_recorded_one_whatever_the_latest_listing_says() -> None:
    # Anchored at 0 when first seen at 60; stopped at 90 (Vast clears its start time) and
    # restarted at 120 (a new start time): the hour before the first sighting stays counted.
    spans = (
        span(RUNNING, at(60), at(89), compute=1.0, storage=0.0),
        span(STOPPED, at(90), at(119), compute=1.0, storage=0.0),
        span(RUNNING, at(120), at(150), compute=1.0, storage=0.0),
    )
    before = instance(*spans[:1], billed_from=at(0))
    stopped = instance(*spans[:2], billed_from=at(0))
    restarted = instance(*spans, billed_from=at(0), started_at=at(120))
    assert total_spend(fleet(at(89), before), at(0), at(89)).usd == pytest.approx(89 / 60)
    assert total_spend(fleet(at(119), stopped), at(0), at(119)).usd == pytest.approx(1.5)
    assert total_spend(fleet(at(150), restarted), at(0), at(150)).usd == pytest.approx(2.0)


def test_no_billing_before_the_first_listing_without_an_anchor_or_its_first_span() -> None:
    undated = running(at(60), at(90), compute=1.0, storage=0.0, started_at=at(0))
    # Seen since 10, but only a later span overlaps the view: not the first sighting.
    cut = instance(
        span(RUNNING, at(60), at(90), compute=1.0, storage=0.0),
        first_seen=at(10),
        billed_from=at(0),
    )
    for view in (undated, cut):
        assert instances_spend([view], at(0), at(90)).usd == pytest.approx(
            pieces_spend(billing_pieces(view.spans, until=at(90)), at(0), at(90)).usd
        ), view


def accepted(view: InstanceView, kind: ActionKind, moment: datetime) -> InstanceView:
    """``view`` with a confirmed ``kind`` call the provider accepted at ``moment``."""
    return replace(view, accepted_call=AcceptedCall(kind, moment))


def test_a_confirmed_destroy_ends_the_bill_at_the_instant_the_provider_accepted_it() -> None:
    # Listed running until 59, destroyed at 60 (the provider bills nothing from then on),
    # seen gone by the verification at 61: billed to 60, not to 61.
    spans = (
        span(RUNNING, at(0), at(59), compute=1.0, storage=0.0),
        span(GONE, at(61), at(61), compute=1.0, storage=0.0),
    )
    destroyed = accepted(instance(*spans), ActionKind.DESTROY, at(60))
    pieces = view_billing_pieces(destroyed, until=at(120))
    assert [(p.start, p.end, p.state) for p in pieces] == [
        (at(0), at(60), RUNNING),
        (at(60), at(61), GONE),
    ]
    assert total_spend(fleet(at(120), destroyed), at(0), at(120)).usd == pytest.approx(1.0)
    assert instances_spend([instance(*spans)], at(0), at(120)).usd == pytest.approx(61 / 60)
    # The activity split still adds up to the spend: the gone piece bills no GPU and $0.
    split = activity_split(pieces, 1, (), at(0), at(120))
    assert split.blind_usd + split.no_gpu_usd == pytest.approx(1.0)
    assert split.blind_gpu_hours == pytest.approx(1.0)


def test_a_confirmed_stop_starts_the_disk_only_bill_at_the_accepted_call() -> None:
    spans = (
        span(RUNNING, at(0), at(59), compute=0.6, storage=0.06),
        span(STOPPED, at(61), at(90), compute=0.6, storage=0.06),
    )
    stopped = accepted(instance(*spans), ActionKind.STOP, at(60))
    figure = instances_spend([stopped], at(0), at(90))
    assert figure.usd == pytest.approx(0.66 + 0.06 * 0.5)
    assert [p.start for p in view_billing_pieces(stopped, until=at(90))] == [at(0), at(60)]


def test_the_accepted_call_moves_nothing_unless_the_span_after_it_confirms_it() -> None:
    spans = (
        span(RUNNING, at(0), at(59), compute=1.0, storage=0.0),
        span(STOPPED, at(61), at(90), compute=1.0, storage=0.0),
        span(GONE, at(95), at(95)),
    )
    cases = [
        # A destroy is confirmed by gone only; the stopped span after the call is not that.
        accepted(instance(*spans), ActionKind.DESTROY, at(60)),
        # A listing after the call still saw it running: the call did not take then (a call
        # repeated later is confirmed by a later listing, whose instant is not this one).
        accepted(instance(*spans), ActionKind.STOP, at(58)),
        # Accepted after the confirming span began: nothing to end earlier.
        accepted(instance(*spans), ActionKind.STOP, at(62)),
    ]
    for view in cases:
        assert view_billing_pieces(view, until=at(95)) == view_billing_pieces(
            replace(view, accepted_call=None), until=at(95)
        ), view.accepted_call


def test_volumes_and_filesystems_count_in_period_spend_gone_ones_included() -> None:
    # A network volume at $0.10/h listed 0..60 then deleted (gone at 61), a filesystem at
    # $0.20/h listed 0..30 then not listed any more (its listing fails): estimated after 30.
    deleted = VolumeLedger("acct", "v1", (RatedSpan(at(0), at(60), 0.1),), gone_at=at(61))
    unlisted = VolumeLedger("acct", "v2", (RatedSpan(at(0), at(30), 0.2),))
    view = replace(fleet(at(120)), volume_ledgers=(deleted, unlisted))
    figure = period_spend(view, at(0), at(120))
    assert figure.usd == pytest.approx(0.1 * 61 / 60 + 0.2 * 2)
    assert figure.estimated_usd == pytest.approx(0.2 * 1.5)
    assert period_spend(view, at(0), at(120), accounts=("other",)).usd == 0


def pieces(until: datetime, *views: InstanceView) -> list[BillingPiece]:
    return ledger_pieces(fleet(until, *views), until=until)


def test_one_instances_spend_is_its_ledger_with_the_anchor_and_the_accepted_call() -> None:
    # The rules' evidence dollars read this: the same pieces as the report and the budget.
    view = accepted(
        instance(
            span(RUNNING, at(10), at(48), compute=1.0, storage=0.0),
            span(InstanceState.GONE, at(62), at(62), compute=0.0, storage=0.0),
            billed_from=at(0),
        ),
        ActionKind.DESTROY,
        at(50),
    )
    assert instance_spend(view, at(0), at(90)).usd == pytest.approx(50 / 60)
    assert instance_spend(view, at(0), at(90)) == instances_spend([view], at(0), at(90))
