"""Property: over random observation sequences, period spend never decreases inside its period
and equals the integral of the billed rates (docs/safety.md, "Period spend").

Each example records a random sequence of polls of one account through the real store (a
migrated SQLite file): an instance launched before its first sighting, listed running, starting,
stopped or in an unreadable state, at changing rates, restarted (the provider's start time
moves), stopped (it disappears), absent (gone) and back, and a volume billing beside it, deleted
or missing from a failed volume listing; whole polls fail (outages). After every poll the day's
spend is read the way the budget rule reads it: the fleet view the store loads, summed by
``period_spend``. The oracle integrates the rates listed: each listing's rate holds until the
next listing (the last one's, while not gone, until now), plus the stretch billed before the
first sighting at the first listing's rate, from the provider's start time at that sighting or
from the previous complete listing (which did not have the instance), whichever is later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.databases import copy_migrated_sqlite
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    InstanceSnapshot,
    InstanceState,
    VolumeSnapshot,
    billed_usd_per_hour,
)
from watchdog_gpu.spend import day_start, period_spend
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

DAY = datetime(2026, 3, 2, tzinfo=UTC)
ACCOUNT = "acct"
LOOKBACK = timedelta(hours=1)
STATES = (
    InstanceState.RUNNING,
    InstanceState.STARTING,
    InstanceState.STOPPED,
    InstanceState.UNKNOWN,
)


@dataclass(frozen=True)
class Poll:
    """One poll, ``minutes`` after the previous one."""

    minutes: int
    outage: bool  # the whole poll fails: nothing is recorded
    listed: bool  # the instance is in the listing (else: absent, gone)
    state: InstanceState
    compute: float
    storage: float
    restart: bool  # the provider's start time moves to this poll
    volume: str  # "listed", "unlisted" (its listing failed) or "deleted"
    volume_rate: float


polls = st.builds(
    Poll,
    minutes=st.integers(1, 45),
    outage=st.booleans(),
    listed=st.sampled_from((True, True, True, False)),
    state=st.sampled_from(STATES),
    compute=st.sampled_from((0.0, 0.5, 1.25, 4.0)),
    storage=st.sampled_from((0.0, 0.02, 0.1)),
    restart=st.booleans(),
    volume=st.sampled_from(("listed", "listed", "unlisted", "deleted")),
    volume_rate=st.sampled_from((0.05, 0.2)),
)


@dataclass
class Oracle:
    """The integral of the listed rates up to a moment (see the module docstring)."""

    usd: float = 0.0
    last: tuple[datetime, float | None] | None = None  # (listed at, rate) of the latest listing
    gone: bool = False

    def listing(self, at: datetime, rate: float | None, *, gone: bool = False) -> None:
        self.usd = self.until(at)
        self.last = (at, rate)
        self.gone = gone

    def until(self, moment: datetime) -> float:
        if self.last is None or self.gone:
            return self.usd
        at, rate = self.last
        if rate is None:
            return self.usd
        return self.usd + rate * (moment - at).total_seconds() / 3600


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    launched_minutes_before=st.integers(0, 120),
    sequence=st.lists(polls, min_size=1, max_size=25),
)
# Dated 30 minutes before a complete listing that does not have it: absent then, it was not
# billing then, so it bills from that listing on, not from its start.
@example(
    launched_minutes_before=30,
    sequence=[
        Poll(5, False, listed, InstanceState.RUNNING, 1.25, 0.02, False, "listed", 0.05)
        for listed in (False, True, True)
    ],
)
def test_period_spend_never_decreases_and_is_the_integral_of_the_billed_rates(
    tmp_path_factory: pytest.TempPathFactory,
    launched_minutes_before: int,
    sequence: list[Poll],
) -> None:
    path = tmp_path_factory.mktemp("spend") / "spend.db"
    copy_migrated_sqlite(path)
    engine = create_engine_for(sqlite_url(path))
    try:
        check(Store(engine), launched_minutes_before, sequence)
    finally:
        engine.dispose()


def check(store: Store, launched_minutes_before: int, sequence: list[Poll]) -> None:
    now = DAY + timedelta(hours=3)
    started: datetime | None = now - timedelta(minutes=launched_minutes_before)
    instance, volume = Oracle(), Oracle()
    anchored = False
    listed_at: datetime | None = None  # the latest complete listing recorded
    volume_deleted = False
    previous = 0.0
    for poll in sequence:
        now += timedelta(minutes=poll.minutes)
        if poll.restart or started is None:
            started = now
        if poll.state is not InstanceState.RUNNING:
            started = None  # a stopped (or not yet running) instance has no start time
        if poll.outage:
            store.record_poll_failure(ACCOUNT, "vast", "server", "HTTP 500", now)
        else:
            instances: tuple[InstanceSnapshot, ...] = ()
            if poll.listed:
                instances = (snapshot(poll, started, now),)
                rate = billed_usd_per_hour(poll.state, poll.compute, poll.storage)
                if instance.last is None and not anchored:
                    anchored = True
                    if poll.state is InstanceState.RUNNING and started is not None:
                        since = started if listed_at is None else max(started, listed_at)
                        instance.usd += (rate or 0.0) * (now - since).total_seconds() / 3600
                instance.listing(now, rate)
            elif instance.last is not None and not instance.gone:
                instance.listing(now, 0.0, gone=True)
            volumes: tuple[VolumeSnapshot, ...] = ()
            problems: dict[str, str] = {}
            if volume_deleted or poll.volume == "deleted":
                if not volume_deleted and volume.last is not None:
                    volume.listing(now, 0.0, gone=True)
                volume_deleted = True
            elif poll.volume == "unlisted":
                problems["volumes"] = "server: HTTP 500"
            else:
                volumes = (volume_snapshot(poll, now),)
                volume.listing(now, poll.volume_rate)
            account = AccountSnapshot("vast", ACCOUNT, now)
            store.record_observation(
                AccountObservation(account, instances, volumes, (), problems), now
            )
            listed_at = now
        period = day_start(now, "UTC")
        view = store.load_fleet_view(now, LOOKBACK, period, {ACCOUNT: "vast"})
        spent = period_spend(view, period, now).usd
        assert spent >= previous - 1e-9, (now, previous, spent)
        assert spent == pytest.approx(instance.until(now) + volume.until(now), abs=1e-6)
        previous = spent


def snapshot(poll: Poll, started: datetime | None, now: datetime) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account=ACCOUNT,
        instance_id="1",
        name="job",
        state=poll.state,
        raw_state=poll.state.value,
        observed_at=now,
        compute_usd_per_hour=poll.compute,
        storage_usd_per_hour=poll.storage,
        started_at=started,
    )


def volume_snapshot(poll: Poll, now: datetime) -> VolumeSnapshot:
    return VolumeSnapshot(
        provider="vast",
        account=ACCOUNT,
        volume_id="7",
        name="data",
        observed_at=now,
        usd_per_hour=poll.volume_rate,
        attached=None,
    )
