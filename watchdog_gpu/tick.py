"""One tick of the watchdog, in phases: observe → record → decide → enqueue → act → tell.

:class:`Watchdog` holds the seams (store, providers, prober, executor, delivery) chosen by the
composition root and runs each phase on its own, so the daemon can schedule them as separate jobs
(poll per account, probe, evaluate+act, deliver) while ``once``, ``simulate`` and the tests run
them in order with :meth:`Watchdog.tick`. ``now`` is always passed in.

Fail soft: a failing account, host, rule or notifier is recorded and counted, and the other
accounts, hosts, rules and notifiers carry on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.activity_marks import activity_changes
from watchdog_gpu.decision_record import audit_data, decision_message
from watchdog_gpu.digest import (
    DIGEST_RULE,
    DigestConfig,
    digest_key,
    digest_notification,
    digest_window,
    latest_due,
)
from watchdog_gpu.episodes import stitch_episodes
from watchdog_gpu.errors import ProviderError, StoreError
from watchdog_gpu.evidence import AccountEvidence
from watchdog_gpu.executor import Executor
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import (
    AccountObservation,
    ActionKind,
    ActionResult,
    ActionStatus,
    Finding,
    InstanceRef,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    PlannedNotification,
    PlanStatus,
    ProbeOutcome,
    Severity,
)
from watchdog_gpu.notify.delivery import Backoff, Deliverer, deliver_due
from watchdog_gpu.notify.render import (
    render_resolution,
)
from watchdog_gpu.plan import Decision, Plan, PlanContext, plan
from watchdog_gpu.probe.condense import condense_samples
from watchdog_gpu.probe.prober import provider_api_samples
from watchdog_gpu.probe.state_log import StateChangeLog
from watchdog_gpu.providers.base import Provider
from watchdog_gpu.reports import DeliveryReport, ExecutorReport, TickReport
from watchdog_gpu.resolutions import cleared_episodes
from watchdog_gpu.rules import evaluate_rules
from watchdog_gpu.rules.base import RuleConfig
from watchdog_gpu.rules.idle_clock import IdleEpisode
from watchdog_gpu.rules.idle_gpu import NAME as IDLE_RULE
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.rules.registry import earliest
from watchdog_gpu.spend import month_start
from watchdog_gpu.spend_report import build_report
from watchdog_gpu.store import Store
from watchdog_gpu.store.rollup import RAW_SAMPLES_FOR
from watchdog_gpu.store.values import ACTIONS_DEFERRED

log = logging.getLogger(__name__)

# The job marks a Watchdog writes (``Store.mark``), each in its phase's transaction: the act job
# acts only on conditions that held at the latest *committed* evaluation of this process; a wake
# shares the fuse's allowance with the tick it follows; a wake is scheduled on the probe round
# the evaluation's rows came from.
EVALUATED = "evaluated"
TICK_STARTED = "tick_started"
PROBED = "probed"


class ProbeRunner(Protocol):
    def probe_all(
        self,
        instances: Sequence[InstanceSnapshot],
        now: datetime,
        leaving: Callable[[], Collection[InstanceRef]] | None = None,
    ) -> list[ProbeOutcome]: ...


@dataclass(frozen=True, slots=True)
class TickSettings:
    """What the tick needs from the configuration (built by the composition root)."""

    context: PlanContext
    lookback: timedelta = timedelta(hours=3)
    sample_retention: timedelta = timedelta(days=7)
    raw_sample_retention: timedelta = RAW_SAMPLES_FOR
    budget_timezone: str = "UTC"
    # A finding seen at the previous evaluation continues its episode (see episodes.py): a bit
    # more than one poll interval, so one missed tick does not split an episode.
    continuity: timedelta = timedelta(minutes=3)
    notify_backoff: Backoff = field(default_factory=Backoff)
    # What each account's GPU evidence can prove (Settings.evidence, evidence.py).
    evidence: Mapping[str, AccountEvidence] = field(default_factory=dict)
    # The busy threshold a provider's utilisation reading is judged with (idle_gpu's).
    threshold_percent: float = 5.0
    # [notify.digest]: the spend digest (digest.py); off by default.
    digest: DigestConfig = field(default_factory=DigestConfig)

    @property
    def rules(self) -> Mapping[str, RuleConfig]:
        return self.context.rules


def _leaving(snapshot: InstanceSnapshot, leaving: Mapping[tuple[str, str], datetime]) -> bool:
    """Whether ``snapshot`` (listed running) predates its instance's accepted stop/destroy."""
    since = leaving.get((snapshot.account, snapshot.instance_id))
    return since is not None and snapshot.observed_at <= since


def _condensed(outcome: ProbeOutcome) -> ProbeOutcome:
    """``outcome`` with its samples condensed; itself when they are already (a streamed
    outcome's runs are, and copying them every tick would cost for nothing)."""
    samples = condense_samples(outcome.samples)
    if len(samples) == len(outcome.samples) and all(
        new is old for new, old in zip(samples, outcome.samples, strict=True)
    ):
        return outcome
    return replace(outcome, samples=samples)


class Watchdog:
    """The engine: every phase of a tick over the seams it is given."""

    def __init__(
        self,
        store: Store,
        providers: Mapping[str, Provider],
        executor: Executor,
        settings: TickSettings,
        *,
        prober: ProbeRunner | None = None,
        delivery: Deliverer | None = None,
        on_tick: Callable[[TickReport], None] | None = None,
        process: str | None = None,
    ) -> None:
        """``process`` names this engine's job marks in the store (default: a new id, so a
        restarted process waits for its own first evaluation before it acts)."""
        self.store = store
        self.providers = providers
        self.executor = executor
        self.settings = settings
        self.prober = prober
        self.delivery = delivery
        self.on_tick = on_tick
        # A failing account is logged when its poll outcome changes, not at every poll.
        self._poll_log = StateChangeLog(log, what="poll")
        self.process = process or uuid.uuid4().hex
        self._digest_enqueued: datetime | None = None  # the due instant last found in the outbox

    # -- the whole tick ---------------------------------------------------------------------

    def tick(self, now: datetime, *, clock: Callable[[], datetime] | None = None) -> TickReport:
        """Every phase in order, as ``once`` and the simulator run them.

        ``clock``: read as each phase (and each account's listing) starts, as the daemon's jobs
        each read the clock — the simulator's virtual clock, on which a hanging provider's
        retries take their time, so whatever comes after happens (and is recorded) later.
        Without it every phase runs at ``now``."""
        at = clock or (lambda: now)
        report = TickReport(now)
        report.polled = self.poll_all(now, clock=clock)
        return self._decide(report, at, wake=False)

    def wake(
        self,
        now: datetime,
        *,
        listing: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> TickReport:
        """A wake (``wake.py``): the phases of a tick but the polls — take the streamed rows
        that cover a verdict's instant, evaluate, act, tell. ``listing``: a decision on listed
        state falls due at this wake, so every account is listed first. ``clock``: as for
        :meth:`tick`."""
        at = clock or (lambda: now)
        report = TickReport(now)
        if listing:
            report.polled = self.poll_all(now, clock=clock)
        return self._decide(report, at, wake=True)

    def _decide(self, report: TickReport, at: Callable[[], datetime], *, wake: bool) -> TickReport:
        """The phases after the listings, each at ``at()`` when it starts."""
        report.probed_at = at()
        report.probes = self.probe(report.probed_at)
        report.now = at()
        if wake:
            self.evaluate(report.now, report, wake=True)
        else:
            self.evaluate(report.now, report)
        report.executed = self.act(at())
        report.delivered = self.deliver(at())
        if self.on_tick is not None and not wake:
            self.on_tick(report)
        return report

    # -- observe and record -----------------------------------------------------------------

    def poll_all(
        self, now: datetime, *, clock: Callable[[], datetime] | None = None
    ) -> dict[str, str]:
        """List every account, then record them all in one transaction (the listings first:
        no write lock is held while the provider APIs answer). ``clock``: each account is
        listed, and recorded, at the instant its listing starts (see :meth:`tick`)."""
        listed = {}
        for account in self.providers:
            at = now if clock is None else clock()
            listed[account] = (at, self._list(account, at))
        with self.store.batch():
            return {name: self._record_poll(name, got, at) for name, (at, got) in listed.items()}

    def poll_account(self, account: str, now: datetime) -> str:
        """List and record one account; returns "ok" or the error kind (recorded, logged)."""
        return self._record_poll(account, self._list(account, now), now)

    def _list(self, account: str, now: datetime) -> AccountObservation | ProviderError:
        try:
            return self.providers[account].observe(now)
        except ProviderError as error:
            return error

    def _record_poll(
        self, account: str, listed: AccountObservation | ProviderError, now: datetime
    ) -> str:
        provider = self.providers[account]
        if isinstance(listed, ProviderError):
            error = listed
            self._poll_log.note(
                account,
                error.kind,
                now.timestamp(),
                "poll failed account=%s provider=%s error_kind=%s detail=%r",
                account,
                provider.name,
                error.kind,
                str(error)[:300],
            )
            self.store.record_poll_failure(account, provider.name, error.kind, str(error), now)
            return error.kind
        self.store.record_observation(listed, now)
        self._poll_log.note(
            account,
            "ok",
            now.timestamp(),
            "polled account=%s instances=%d",
            account,
            len(listed.instances),
        )
        return "ok"

    def probe(self, now: datetime) -> list[ProbeOutcome]:
        """Probe every running instance with an SSH endpoint; record outcomes and samples.

        Not probed: an instance whose stop or destroy the provider accepted (``called``) or that
        was verified after the listing that still says "running". Its SSH goes away before the
        store's snapshot says so, and an "unreachable" outcome there is noise, not news."""
        leaving = self._leaving(now)
        running = [
            record.snapshot
            for record in self.store.latest_instances()
            if record.snapshot.state is InstanceState.RUNNING
            and record.snapshot.account in self.providers
            and not _leaving(record.snapshot, leaving)
        ]
        # The providers' utilisation readings are recorded whether or not any account can be
        # probed over SSH: they prove a GPU busy (evidence.py).
        api_samples = provider_api_samples(
            running, threshold_percent=self.settings.threshold_percent
        )
        if self.prober is None:
            with self.store.batch():
                if api_samples:
                    self.store.record_samples(api_samples)
                self.store.mark(self.process, PROBED, now)
            return []

        def left_meanwhile() -> set[InstanceRef]:
            # The act job runs in its own thread: a call made while this round read the
            # streams (or ran burst probes) makes the host vanish mid-round.
            now_leaving = self._leaving(now)
            return {s.ref for s in running if _leaving(s, now_leaving)}

        outcomes = [
            _condensed(outcome) for outcome in self.prober.probe_all(running, now, left_meanwhile)
        ]
        with self.store.batch():  # one commit for the round
            self.store.record_probes(outcomes)
            if api_samples:
                self.store.record_samples(api_samples)
            self.store.mark(self.process, PROBED, now)
        return outcomes

    def _leaving(self, now: datetime) -> dict[tuple[str, str], datetime]:
        """Instances whose stop or destroy went out, and until which listing they are left
        alone (see :meth:`probe`)."""
        leaving: dict[tuple[str, str], datetime] = {}
        recent = self.store.list_actions(
            statuses=[ActionStatus.CLAIMED, ActionStatus.CALLED, ActionStatus.VERIFIED],
            since=now - timedelta(days=1),
        )
        for action in recent:
            if action.dry_run or action.kind not in (ActionKind.DESTROY, ActionKind.STOP):
                continue
            if action.status == ActionStatus.CLAIMED and action.result != ActionResult.CALLING:
                continue  # claimed, not called yet: it may still be cancelled
            # A call in flight (marked "calling", or called and not yet verified) skips every
            # listing; a verified one the listings before it.
            called = action.status != ActionStatus.VERIFIED
            until = datetime.max.replace(tzinfo=now.tzinfo) if called else action.updated_at
            leaving[(action.account, action.instance_id)] = until
        return leaving

    # -- decide and enqueue -----------------------------------------------------------------

    def load_view(self, now: datetime) -> FleetView:
        """The view of the configured accounts only: an account removed from the configuration
        is no longer polled, and its instances' last known rates must not keep accruing as
        estimated spend (docs/safety.md, "Unknown cost") nor draw actions no provider can run."""
        since = month_start(now, self.settings.budget_timezone) - timedelta(days=1)
        configured = {name: provider.name for name, provider in self.providers.items()}
        view = self.store.load_fleet_view(now, self.settings.lookback, since, configured)
        return replace(view, evidence=self.settings.evidence)

    def evaluate(
        self, now: datetime, report: TickReport | None = None, *, wake: bool = False
    ) -> Plan:
        """Rules → findings → plan; write findings, actions, notifications and audit events,
        all in one transaction (one commit per evaluation, not one per decision). ``wake``: an
        evaluation between two ticks (``wake.py``), which shares the fuse's per-tick allowance
        with the tick before it."""
        with self.store.batch():
            return self._evaluate(now, report, wake)

    def _evaluate(self, now: datetime, report: TickReport | None, wake: bool) -> Plan:
        # Read before the view: the rows it reads are from this probe round or a newer one.
        marks = self.store.marks(self.process)
        view = self.load_view(now)
        evaluation = evaluate_rules(view, now, self.settings.rules)
        recorded = self.store.list_findings(seen_since=now - self.settings.continuity)
        findings = stitch_episodes(evaluation.findings, recorded, now, self.settings.continuity)
        self.store.record_findings(findings, now)
        self._record_activity(view, evaluation.idle_episodes, now)
        self.store.mark(self.process, EVALUATED, now)
        if not wake:
            self.store.mark(self.process, TICK_STARTED, now)
        tick_started = marks.get(TICK_STARTED) if wake else None
        result = plan(findings, view, now, self.settings.context, tick_started=tick_started)
        planned = {d.action.episode_key for d in result.decisions if d.action is not None}
        for decision in result.decisions:
            self._record(decision, now, view.notification_keys)
        if result.fuse_tripped:
            self._fuse_tripped(result, now)
        if result.deferred:
            self._deferred(result, now)
        self._resolve_cleared(findings, view, planned, now)
        if report is not None:
            report.probed_at = marks.get(PROBED)
            report.findings = findings
            report.plan = result
            report.failed_rules = evaluation.failed
            report.next_change = evaluation.next_change
            report.next_due = result.next_due(now)
            report.next_listed = earliest(evaluation.next_listed, result.next_listed_due(now))
        return result

    def _record_activity(
        self, view: FleetView, episodes: Mapping[str, IdleEpisode] | None, now: datetime
    ) -> None:
        """Append the activity marks that changed (activity_marks.py), judged by the idle rule's
        clock (``episodes``: its running episodes; None: the rule did not run, nothing is
        known)."""
        if episodes is None:
            return
        config = self.settings.rules.get(IDLE_RULE)
        idle = config if isinstance(config, IdleGpuConfig) else IdleGpuConfig()
        changes = activity_changes(
            view,
            episodes,
            {key: mark for key, mark in self.store.current_activity().items() if mark},
            now=now,
            settings=idle.clock_settings,
            previous_evaluation=self.store.latest_mark_at(EVALUATED),
        )
        self.store.record_activity(changes, now)

    def _record(self, decision: Decision, now: datetime, enqueued: frozenset[str]) -> None:
        """Write what a decision calls for: the action, the message, the audit event.
        ``enqueued``: the notification keys the view saw in the outbox."""
        finding, action, status = decision.finding, decision.action, decision.status
        if status is PlanStatus.EXECUTE and action is not None:
            message = f"{action.kind.value} planned: {finding.summary}"
            self._write(decision, now, "action_planned", message, action=action)
            return
        note = decision_message(decision, now)
        if note is None or (action is None and note.idempotency_key in enqueued):
            # Already in the outbox when the view was read, and notifications are never
            # deleted: recording it would write nothing (an alert standing for a whole episode
            # comes back every tick: a transaction per account and tick for nothing).
            return
        if status is PlanStatus.BLOCKED and action is not None:
            message = f"{action.kind.value} held by the fuse: {finding.summary}"
            self._write(
                decision,
                now,
                "action_blocked",
                message,
                action=action,
                action_status=ActionStatus.BLOCKED,
                notification=note,
            )
        elif status is PlanStatus.PROTECTED:
            message = f"{finding.summary} ({decision.note})"
            self._write(decision, now, "protected", message, notification=note)
        else:
            kind = "warning" if status is PlanStatus.WARN else "alert"
            self._write(decision, now, kind, finding.summary, notification=note)

    def _write(
        self,
        decision: Decision,
        now: datetime,
        audit_kind: str,
        message: str,
        *,
        action: PlannedAction | None = None,
        action_status: ActionStatus = ActionStatus.PENDING,
        notification: PlannedNotification | None = None,
    ) -> None:
        finding = decision.finding
        self.store.record_decision(
            now,
            audit_kind=audit_kind,
            message=message,
            action=action,
            action_status=action_status,
            notification=notification,
            account=finding.account,
            instance_id=finding.instance_id,
            rule=finding.rule,
            data=audit_data(decision),
        )

    def _fuse_tripped(self, result: Plan, now: datetime) -> None:
        note = PlannedNotification(
            idempotency_key=f"fuse:{now.isoformat()}",
            severity=Severity.CRITICAL,
            title=f"Fuse tripped: {len(result.blocked)} destructive actions held",
            body=(
                f"{result.fuse_reason}.\nNo instance will be stopped or destroyed by ordinary "
                "rules until a human looks: check `watchdog-gpu status`, then run "
                "`watchdog-gpu fuse reset`. The budget emergency still acts."
            ),
            created_at=now,
        )
        self.store.record_fuse_trip(now, result.fuse_reason, note)

    def _deferred(self, result: Plan, now: datetime) -> None:
        """One audit event per tick that deferred actions; one message per wave of them."""
        note = None
        if result.announce_deferral:
            count = len(result.deferred)
            note = PlannedNotification(
                idempotency_key=f"fuse:deferred:{now.isoformat()}",
                severity=Severity.WARNING,
                title=f"{count} stops/destroys deferred by the fuse's rate limits",
                body=(
                    f"{result.deferral_reason}.\nThey go ahead on later ticks within the "
                    "limits, the costliest first (one overdue an hour longer before it), each "
                    "only while its condition still holds; no "
                    "reset is needed. Instances: "
                    + ", ".join(f"{a.account}/{a.instance_id}" for a in result.deferred)
                ),
                created_at=now,
            )
        self.store.add_audit_event(
            ACTIONS_DEFERRED,
            now,
            message=result.deferral_reason,
            data={"deferred": len(result.deferred)},
        )
        if note is not None:
            self.store.enqueue_notification(note)

    def _resolve_cleared(
        self, findings: Sequence[Finding], view: FleetView, planned: set[str], now: datetime
    ) -> None:
        """Write the resolutions of the episodes that cleared (``resolutions.py`` decides);
        ``planned``: the episodes this evaluation planned an action for."""
        recorded = self.store.list_findings(seen_since=now - self.settings.lookback)
        for resolution in cleared_episodes(findings, recorded, view, planned, now):
            finding = resolution.finding
            self.store.record_decision(
                now,
                audit_kind="resolved",
                message=resolution.reason,
                notification=render_resolution(
                    finding,
                    reason=resolution.reason,
                    now=now,
                    action_cancelled=resolution.action_cancelled,
                    episode_key=resolution.episode,
                    key=resolution.key,
                ),
                account=finding.account,
                instance_id=finding.instance_id,
                rule=finding.rule,
            )

    # -- act and tell -----------------------------------------------------------------------

    def act(self, now: datetime) -> ExecutorReport:
        """Carry out due actions on the latest evaluation this process committed (read fresh:
        the act job runs in its own thread, beside an evaluation that may not have committed)."""
        return self.executor.run(now, evaluated_at=self.store.marks(self.process).get(EVALUATED))

    def deliver(self, now: datetime) -> DeliveryReport | None:
        if self.delivery is None:
            return None
        try:
            return deliver_due(self.store, self.delivery, now, self.settings.notify_backoff)
        except StoreError:
            log.exception("notification delivery pass failed")
            return None

    def enqueue_digest(self, now: datetime) -> bool:
        """Enqueue the spend digest of the latest period due by ``now`` unless the outbox has it
        already (digest.py: once per period, also after a restart); the delivery job sends it.
        Returns True when it was enqueued now."""
        config = self.settings.digest
        due = latest_due(config, now)
        if due is None or due == self._digest_enqueued:
            return False
        key = digest_key(due)
        enqueued = False
        if self.store.get_notification(key) is None:
            start, end = digest_window(config, due)
            view = self.store.load_fleet_view(end, timedelta(0), start, cached=False, activity=True)
            actions = [row.to_record() for row in self.store.list_actions(since=start)]
            report = build_report(view, actions, start, end, "account")
            note = digest_notification(report, config, due, created_at=now)
            enqueued = self.store.enqueue_notification(note)
            if enqueued:
                self.store.add_audit_event(
                    "digest",
                    now,
                    rule=DIGEST_RULE,
                    message=note.title,
                    data={"key": key, "start": start.isoformat(), "end": end.isoformat()},
                )
                log.info("spend digest enqueued key=%s", key)
        self._digest_enqueued = due
        return enqueued

    def prune(self, now: datetime) -> int:
        # Raw samples stay while the rules may read them (a long unobserved.after), and at least
        # as long as configured.
        raw_samples_for = max(self.settings.raw_sample_retention, self.settings.lookback)
        return self.store.prune(
            now, self.settings.sample_retention, raw_samples_for=raw_samples_for
        )
