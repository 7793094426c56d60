"""The daemon's job functions, called directly on a virtual clock over the real engine (the
simulator's in-process provider dialects, the real SQLite store and migrations)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.cli import main
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.digest import DigestConfig
from watchdog_gpu.errors import StoreError
from watchdog_gpu.jobs import (
    ACT,
    DELIVER,
    DIGEST,
    EVALUATE,
    PRUNE,
    VERIFYING,
    Jobs,
    Progress,
    poll_job_id,
)
from watchdog_gpu.model import (
    AccountObservation,
    ActionKind,
    ActionStatus,
    PlannedNotification,
    ProbeOutcome,
    Severity,
)
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, StepOutcome, TickReport
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.simulate import Simulation, simulation

POLL = timedelta(seconds=60)

TWO_ACCOUNTS = """
name = "two-accounts"
start = "2026-03-02T20:00:00Z"
duration = "6h"

[[accounts]]
name = "vast-ok"
provider = "vast"
balance_usd = 50.0

[[accounts.instances]]
id = "101"
name = "sweep"
interruptible = true
compute_usd_per_hour = 0.30
disk_gb = 20
storage_usd_per_gb_month = 0.10
events = [{ at = "0s", state = "running", gpu_util = 90 }, { at = "5m", state = "paused" }]

[[accounts]]
name = "vast-down"
provider = "vast"
balance_usd = 50.0
events = [{ at = "0s", api = "error500" }]

[[accounts.instances]]
id = "201"
name = "other"
compute_usd_per_hour = 0.40
events = [{ at = "0s", state = "running", gpu_util = 80 }]
"""


@dataclass
class RecordingObserver:
    """Collects what the jobs report (a stand-in for the metrics)."""

    polls: list[tuple[str, str]] = field(default_factory=list)
    probes: list[int] = field(default_factory=list)
    ticks: list[TickReport] = field(default_factory=list)
    executor: list[ExecutorReport] = field(default_factory=list)
    deliveries: list[DeliveryReport | None] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    done: list[tuple[str, float]] = field(default_factory=list)

    def on_poll(self, account: str, result: str, now: datetime) -> None:
        self.polls.append((account, result))

    def on_probe(self, outcomes: Sequence[ProbeOutcome], now: datetime) -> None:
        self.probes.append(len(outcomes))

    def on_tick(self, report: TickReport) -> None:
        self.ticks.append(report)

    def on_executor(self, report: ExecutorReport, now: datetime) -> None:
        self.executor.append(report)

    def on_delivery(self, report: DeliveryReport | None, now: datetime) -> None:
        self.deliveries.append(report)

    def on_job_event(self, job_id: str, event: str) -> None:
        self.events.append((job_id, event))

    def on_job_done(self, job_id: str, seconds: float) -> None:
        self.done.append((job_id, seconds))


@dataclass
class CountingPinger:
    pings: int = 0
    failures: list[str] = field(default_factory=list)

    def ping(self) -> bool:
        self.pings += 1
        return True

    def fail(self, reason: str) -> bool:
        self.failures.append(reason)
        return True


@dataclass
class Harness:
    sim: Simulation
    jobs: Jobs
    observer: RecordingObserver
    pinger: CountingPinger
    woken: list[datetime]

    @property
    def clock(self) -> VirtualClock:
        return self.sim.clock


@pytest.fixture
def harness() -> Iterator[Harness]:
    with simulation(parse_scenario(TWO_ACCOUNTS)) as sim:
        observer = RecordingObserver()
        pinger = CountingPinger()
        woken: list[datetime] = []
        jobs = Jobs(
            sim.assembly.watchdog,
            sim.clock,
            Progress(sim.clock),
            poll_interval=POLL,
            observer=observer,
            dead_mans_switch=pinger,
            wake_act=lambda: woken.append(sim.clock.now()),
        )
        yield Harness(sim, jobs, observer, pinger, woken)


def test_a_poll_job_records_the_account_and_its_success(harness: Harness) -> None:
    assert harness.jobs.poll("vast-ok") == "ok"

    instances = harness.sim.store.latest_instances()
    assert [(r.snapshot.account, r.snapshot.instance_id) for r in instances] == [("vast-ok", "101")]
    stats = harness.jobs.progress.stats(poll_job_id("vast-ok"))
    assert (stats.runs, stats.successes, stats.errors) == (1, 1, 0)
    assert stats.last_success_at == harness.clock.now()
    assert harness.observer.polls == [("vast-ok", "ok")]


def test_a_provider_failure_is_a_handled_poll_outcome_that_does_not_stop_other_accounts(
    harness: Harness,
) -> None:
    assert harness.jobs.poll("vast-down") == "transient"
    assert harness.jobs.poll("vast-ok") == "ok"

    assert harness.jobs.polled() == {"vast-ok": "ok", "vast-down": "transient"}
    down = harness.jobs.progress.stats(poll_job_id("vast-down"))
    assert (down.successes, down.errors, down.last_outcome) == (1, 0, "ok")
    assert ("vast-down", "transient") in harness.observer.polls


def test_a_failing_account_is_logged_once_while_it_keeps_failing_and_again_when_it_recovers(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="watchdog_gpu.tick"):
        for _ in range(5):
            assert harness.jobs.poll("vast-down") == "transient"
            harness.clock.sleep(60)

    failed = [r for r in caplog.records if r.getMessage().startswith("poll failed")]
    assert [r.levelno for r in failed] == [logging.WARNING] + [logging.DEBUG] * 4
    assert "account=vast-down" in failed[0].getMessage()


class ExplodingProvider:
    """A provider adapter with a bug: observe raises something that is no ProviderError."""

    name = "vast"

    def observe(self, now: datetime) -> AccountObservation:
        raise RuntimeError("adapter bug")


def test_an_unexpected_exception_in_one_poll_is_caught_logged_and_counted(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    providers = harness.sim.assembly.watchdog.providers
    assert isinstance(providers, dict)
    providers["vast-down"] = ExplodingProvider()

    assert harness.jobs.poll("vast-down") is None
    assert harness.jobs.poll("vast-ok") == "ok"

    stats = harness.jobs.progress.stats(poll_job_id("vast-down"))
    assert (stats.runs, stats.successes, stats.errors) == (1, 0, 1)
    assert stats.last_outcome == "RuntimeError"
    assert harness.jobs.polled()["vast-down"] == "RuntimeError"
    assert harness.observer.events == [(poll_job_id("vast-down"), "error")]
    assert "job failed job=poll:vast-down error_kind=RuntimeError" in caplog.text
    # a failed run's duration is reported like a good one's
    assert [job for job, _ in harness.observer.done] == [
        poll_job_id("vast-down"),
        poll_job_id("vast-ok"),
    ]


def test_every_run_reports_how_long_it_took_on_the_monotonic_clock(harness: Harness) -> None:
    class SlowClock:
        """The harness clock, whose monotonic time jumps 2.5 s at each read."""

        def __init__(self) -> None:
            self.ticks = 0.0

        def now(self) -> datetime:
            return harness.clock.now()

        def monotonic(self) -> float:
            self.ticks += 2.5
            return self.ticks

        def sleep(self, seconds: float) -> None:
            harness.clock.sleep(seconds)

    harness.jobs.clock = SlowClock()
    harness.jobs.prune()

    assert harness.observer.done == [(PRUNE, 2.5)]


def test_each_job_reads_the_clock_once_and_works_at_that_instant(harness: Harness) -> None:
    reads: list[datetime] = []

    class CountingClock:
        def now(self) -> datetime:
            reads.append(harness.clock.now())
            return reads[-1]

        def monotonic(self) -> float:
            return harness.clock.monotonic()

        def sleep(self, seconds: float) -> None:
            harness.clock.sleep(seconds)

    harness.jobs.clock = CountingClock()
    harness.jobs.poll("vast-ok")
    assert len(reads) == 1
    report = harness.jobs.evaluate()

    assert len(reads) == 2
    assert report is not None
    assert report.now == reads[1]


def test_each_job_reads_its_instant_and_works_inside_the_job_scope(harness: Harness) -> None:
    # The demo's night holds its clock still in the scope: the instant a job stamps must be read
    # inside it, and the whole body (the listing, the records) must run there too.
    events: list[str] = []

    @contextmanager
    def scope() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    class ScopedClock:
        def now(self) -> datetime:
            events.append("now")
            return harness.clock.now()

        def monotonic(self) -> float:
            return harness.clock.monotonic()

        def sleep(self, seconds: float) -> None:
            harness.clock.sleep(seconds)

    harness.jobs.clock = ScopedClock()
    harness.jobs.job_scope = scope
    observed: list[str] = []
    harness.jobs.observer.on_poll = lambda *_: observed.append(events[-1])  # type: ignore[method-assign]
    harness.jobs.poll("vast-ok")

    assert events == ["enter", "now", "exit"]
    assert observed == ["now"]  # the poll was recorded and observed inside the scope


def test_polls_older_than_three_intervals_are_stale_and_accounts_never_polled_say_so(
    harness: Harness,
) -> None:
    harness.jobs.poll("vast-ok")
    harness.clock.advance(3 * POLL)
    assert harness.jobs.polled() == {"vast-ok": "ok", "vast-down": "not_polled"}

    harness.clock.advance(timedelta(seconds=1))

    assert harness.jobs.polled() == {"vast-ok": "stale", "vast-down": "not_polled"}


def test_a_healthy_evaluation_pings_the_dead_mans_switch_and_wakes_the_act_job(
    harness: Harness,
) -> None:
    providers = harness.sim.assembly.watchdog.providers
    assert isinstance(providers, dict)
    del providers["vast-down"]  # only the account that works
    harness.jobs.poll("vast-ok")

    report = harness.jobs.evaluate()

    assert report is not None
    assert report.healthy
    assert harness.pinger.pings == 1
    assert harness.woken == [harness.clock.now()]
    assert harness.observer.ticks == [report]
    summary = harness.jobs.summary
    assert (summary.accounts, summary.instances, summary.last_tick_at) == (
        1,
        1,
        harness.clock.now(),
    )


def test_an_evaluation_with_a_failing_account_tells_the_dead_mans_switch_why(
    harness: Harness,
) -> None:
    harness.jobs.poll("vast-ok")
    harness.jobs.poll("vast-down")

    report = harness.jobs.evaluate()

    assert report is not None
    assert report.polled == {"vast-ok": "ok", "vast-down": "transient"}
    assert not report.healthy
    assert harness.pinger.pings == 0
    # The outside service hears of the failure at once, with the reason (borgmatic's /fail).
    assert harness.pinger.failures == [
        "watchdog-gpu tick not healthy: accounts=vast-down:transient failed_rules=-"
    ]
    assert harness.jobs.progress.stats(EVALUATE).successes == 1  # the job itself worked


def test_a_failing_evaluation_is_counted_reported_as_failure_and_wakes_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(now: datetime, report: TickReport | None = None) -> None:
        raise StoreError("database error: disk I/O error")

    monkeypatch.setattr(harness.sim.assembly.watchdog, "evaluate", broken)

    assert harness.jobs.evaluate() is None

    stats = harness.jobs.progress.stats(EVALUATE)
    assert (stats.successes, stats.errors, stats.last_outcome) == (0, 1, "StoreError")
    assert harness.pinger.pings == 0
    assert harness.pinger.failures == ["watchdog-gpu evaluation failed: StoreError"]
    assert harness.woken == []


def test_a_failing_observer_never_fails_the_job(harness: Harness) -> None:
    class BrokenObserver(RecordingObserver):
        def on_poll(self, account: str, result: str, now: datetime) -> None:
            raise ValueError("collector bug")

    harness.jobs.observer = BrokenObserver()

    assert harness.jobs.poll("vast-ok") == "ok"
    assert harness.jobs.progress.stats(poll_job_id("vast-ok")).successes == 1


def test_once_stopping_the_jobs_do_nothing(harness: Harness) -> None:
    harness.jobs.stop.set()

    assert harness.jobs.poll("vast-ok") is None
    assert harness.jobs.evaluate() is None
    assert harness.jobs.act() is None

    assert harness.sim.store.latest_instances() == []
    assert harness.jobs.progress.snapshot() == {}
    assert harness.pinger.pings == 0
    assert harness.pinger.failures == []


def test_an_evaluation_and_an_act_pass_that_moved_an_action_wake_the_delivery_job(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A warning enqueued by the evaluation must not wait for the delivery job's own interval
    # (it would reach the user that much less than warn_before ahead of the action).
    woken: list[str] = []
    harness.jobs.wake_act = lambda: woken.append(ACT)
    harness.jobs.wake_deliver = lambda: woken.append(DELIVER)
    harness.jobs.poll("vast-ok")

    harness.jobs.evaluate()
    assert woken == [ACT, DELIVER]

    quiet = ExecutorReport()
    monkeypatch.setattr(harness.sim.assembly.watchdog, "act", lambda now: quiet)
    harness.jobs.act()
    assert woken == [ACT, DELIVER]  # nothing changed, no message to send

    outcome = StepOutcome(
        "idle_gpu:vast-ok/101:x:destroy", "idle_gpu", "verified", "vast-ok", ActionKind.DESTROY
    )
    moved = ExecutorReport((outcome,))
    monkeypatch.setattr(harness.sim.assembly.watchdog, "act", lambda now: moved)
    harness.jobs.act()
    assert woken == [ACT, DELIVER, DELIVER]


def test_the_deliver_job_sends_due_notifications_from_the_outbox(harness: Harness) -> None:
    note = PlannedNotification(
        idempotency_key="test:hello",
        severity=Severity.INFO,
        title="hello",
        body="a test message",
        created_at=harness.clock.now(),
    )
    harness.sim.store.enqueue_notification(note)

    report = harness.jobs.deliver()

    assert report is not None
    assert report.delivered == 1
    assert [sent.idempotency_key for _, sent in harness.sim.capture.sent] == ["test:hello"]
    assert harness.sim.store.notification_backlog() == 0
    assert harness.observer.deliveries == [report]
    assert harness.jobs.progress.stats(DELIVER).successes == 1


def test_the_digest_job_enqueues_each_due_digest_once_and_wakes_the_delivery_job(
    harness: Harness,
) -> None:
    woken: list[str] = []
    harness.jobs.wake_deliver = lambda: woken.append(DELIVER)
    watchdog = harness.sim.assembly.watchdog
    daily = DigestConfig(every="daily", at="20:01")  # the scenario starts at 20:00 UTC
    watchdog.settings = replace(watchdog.settings, digest=daily)
    harness.jobs.poll("vast-ok")

    assert harness.jobs.digest() is True  # yesterday's, never sent: late, once
    assert harness.jobs.digest() is False
    harness.clock.advance(timedelta(minutes=1))
    assert harness.jobs.digest() is True  # today's
    harness.clock.advance(timedelta(minutes=1))
    assert harness.jobs.digest() is False

    assert woken == [DELIVER, DELIVER]
    assert harness.jobs.deliver() is not None
    sent = [note for _, note in harness.sim.capture.sent if note.rule == "digest"]
    assert [note.idempotency_key for note in sent] == [
        "digest:2026-03-01T20:01:00+00:00",
        "digest:2026-03-02T20:01:00+00:00",
    ]
    assert harness.jobs.progress.stats(DIGEST).successes == 4


def test_the_prune_job_runs_the_retention(harness: Harness) -> None:
    harness.jobs.poll("vast-ok")

    assert harness.jobs.prune() == 0
    assert harness.jobs.progress.stats(PRUNE).successes == 1


def test_the_jobs_run_one_after_another_destroy_a_paused_interruptible_and_verify_it(
    harness: Harness,
) -> None:
    # The daemon's schedule in miniature: every minute poll, probe, evaluate, act, deliver.
    providers = harness.sim.assembly.watchdog.providers
    assert isinstance(providers, dict)
    del providers["vast-down"]
    end = harness.clock.now() + timedelta(hours=1)
    while harness.clock.now() < end:
        harness.jobs.poll("vast-ok")
        harness.jobs.probe()
        harness.jobs.evaluate()
        harness.jobs.act()
        harness.jobs.deliver()
        harness.clock.advance(POLL)

    actions = harness.sim.store.list_actions()
    assert [(a.instance_id, a.rule, a.kind.value, a.status) for a in actions] == [
        ("101", "paused_interruptible", "destroy", ActionStatus.VERIFIED)
    ]
    assert harness.sim.world.state("vast-ok", "101") == "gone"
    verified = [r for r in harness.observer.executor if r.count(ActionStatus.VERIFIED)]
    assert len(verified) == 1
    assert harness.jobs.progress.stats(ACT).errors == 0


def test_progress_is_safe_to_update_from_several_threads(harness: Harness) -> None:
    progress = Progress(harness.clock)
    now = harness.clock.now()

    def work() -> None:
        for _ in range(500):
            progress.started("job")
            progress.succeeded("job", now)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    stats = progress.stats("job")
    assert (stats.runs, stats.successes) == (2000, 2000)


BIG_DISK = """
name = "big-disk-bid"
start = "2026-03-02T20:00:00Z"
duration = "2h"

[[accounts]]
name = "vast-ok"
provider = "vast"
balance_usd = 500.0

[[accounts.instances]]
id = "101"
name = "sweep"
interruptible = true
compute_usd_per_hour = 3.00
disk_gb = 4000
storage_usd_per_gb_month = 0.20
events = [{ at = "0s", state = "running", gpu_util = 90 }, { at = "5m", state = "paused" }]
"""


def test_a_destroy_is_verified_when_its_re_listing_is_due_and_the_ledger_ends_its_bill_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with simulation(parse_scenario(BIG_DISK), database=tmp_path / "night.db") as sim:
        due: list[datetime] = []
        jobs = Jobs(
            sim.assembly.watchdog,
            sim.clock,
            Progress(sim.clock),
            poll_interval=POLL,
            act_at=due.append,
        )
        # The daemon's schedule in miniature, with the act job also run when asked (act_at).
        end = sim.clock.now() + timedelta(hours=1)
        while sim.clock.now() < end:
            jobs.poll("vast-ok")
            jobs.probe()
            jobs.evaluate()
            jobs.act()
            next_tick = sim.clock.now() + POLL
            while due and min(due) < next_tick and sim.store.list_actions(statuses=VERIFYING):
                sim.clock.set(max(min(due), sim.clock.now()))
                due.clear()
                jobs.act()
            sim.clock.set(next_tick)
        (action,) = sim.store.list_actions()
        assert action.status == ActionStatus.VERIFIED
        (called, gone) = [a for a in sim.world.actions() if a.source != "script"]
        # Asked for the re-listing verify_interval after the call, which saw the destroy done.
        assert gone.at - called.at == timedelta(seconds=30)
        assert action.updated_at == gone.at
        billed = sim.world.spend_usd("vast-ok", "101")
        database = str(tmp_path / "night.db")

    window = ["--since", "2026-03-02T20:00:00Z", "--until", end.isoformat()]
    code = main(["report", "--db", database, *window, "--by", "instance", "--json"])
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    # The ledger ends the bill at the verification's listing: the provider's bill to the cent.
    assert round(row["usd"], 2) == round(billed, 2)
    assert row["usd"] == pytest.approx(billed, abs=1e-4)
