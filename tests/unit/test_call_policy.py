"""The decisions around a provider call (call_policy.py), without a store or a provider."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.call_policy import (
    MAX_REFUSED_CALLS,
    AfterError,
    CallOrders,
    Listing,
    after_call_error,
    at_the_call,
    retry_at,
)
from watchdog_gpu.errors import (
    AuthError,
    NotFoundError,
    PermanentError,
    ProviderError,
    TransientError,
)
from watchdog_gpu.model import InstanceSnapshot, InstanceState

NOW = datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
DECIDED = InstanceSnapshot(
    provider="vast",
    account="vast-main",
    instance_id="9001",
    name="train",
    state=InstanceState.PAUSED,
    raw_state="paused",
    observed_at=NOW,
)
HOLD = CallOrders(hold_on_unreadable_listing=True)


@pytest.mark.parametrize(
    ("error", "attempts", "verdict"),
    [
        (NotFoundError("gone"), 1, AfterError.VERIFY),
        (PermanentError("unreadable 200", status_code=200), 1, AfterError.VERIFY),
        (AuthError("key refused", status_code=401), 5, AfterError.AWAIT_ACCOUNT),
        (PermanentError("bad request", status_code=400), 1, AfterError.RETRY_REFUSED),
        (PermanentError("bad request", status_code=400), MAX_REFUSED_CALLS, AfterError.GIVE_UP),
        (TransientError("HTTP 503", status_code=503), 40, AfterError.RETRY),
    ],
)
def test_what_a_failed_call_leads_to(
    error: ProviderError, attempts: int, verdict: AfterError
) -> None:
    assert after_call_error(error, attempts) is verdict


def test_a_listing_newer_than_the_evaluation_holds_the_call_without_listing() -> None:
    asked: list[bool] = []

    def never() -> Listing:
        asked.append(True)
        return ()

    held = at_the_call(DECIDED, NOW - timedelta(seconds=30), CallOrders(), never)
    assert held is not None
    assert "newer than the latest evaluation" in held.reason
    assert asked == []


def test_a_failing_listing_holds_only_the_calls_told_to_hold() -> None:
    failing = TransientError("vast: HTTP 500")
    assert at_the_call(DECIDED, NOW, CallOrders(), lambda: failing) is None
    held = at_the_call(DECIDED, NOW, HOLD, lambda: failing)
    assert held is not None
    assert held.error is failing


def test_a_changed_listing_holds_every_call_and_an_unchanged_one_none() -> None:
    resumed = replace(DECIDED, state=InstanceState.RUNNING, raw_state="running")
    held = at_the_call(DECIDED, NOW, CallOrders(), lambda: (resumed,))
    assert held is not None
    assert held.error is None
    assert "lists it running, not paused as decided" in held.reason
    assert at_the_call(DECIDED, NOW, CallOrders(), lambda: (DECIDED,)) is None
    assert at_the_call(DECIDED, NOW, CallOrders(), lambda: ()) is None  # gone: verified after


def test_a_retry_backs_off_but_never_past_the_next_escalation() -> None:
    after = timedelta(minutes=10)
    assert retry_at(NOW, 1, NOW, after, timedelta(minutes=15)) == NOW + timedelta(seconds=30)
    assert retry_at(NOW, 3, NOW, after, timedelta(minutes=15)) == NOW + timedelta(minutes=2)
    late = NOW + timedelta(minutes=9)
    assert retry_at(late, 10, NOW, after, timedelta(minutes=15)) == NOW + after
