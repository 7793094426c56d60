"""Run the doctor: read every account once, probe once, evaluate the real rules — read-only.

Only listing calls reach the providers, the executor and delivery never run, and the user's
database is never written: the observation goes into a throw-away SQLite file and the real rules
and planner run over it, so every time-based clock starts now. Only the SSH host keys the daemon
pinned are read from the user's database (never created or migrated), so a host offering another
key says "host key changed" as in the daemon; an instance without a pin is trusted on first use
for this run. Each API call is retried for at most ``DOCTOR_RETRY_BUDGET``. ``docs/doctor.md``,
"Read-only, by construction".
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from watchdog_gpu.clock import Clock
from watchdog_gpu.config import Settings
from watchdog_gpu.doctor.report import DoctorReport, account_report, rule_verdicts
from watchdog_gpu.errors import ProviderError, StoreError
from watchdog_gpu.model import AccountObservation, ProbeOutcome
from watchdog_gpu.probe.runner import CommandRunner, StreamSource
from watchdog_gpu.probe.stream_buffer import StreamState
from watchdog_gpu.reports import TickReport
from watchdog_gpu.store import Store, create_engine_for, display_url, sqlite_url
from watchdog_gpu.store.urls import sqlite_file
from watchdog_gpu.wiring import Assembly, TransportFactory, assemble, open_store

log = logging.getLogger(__name__)

# The longest doctor retries one API call (the daemon's default budget is 60 s).
DOCTOR_RETRY_BUDGET = timedelta(seconds=10)
# How often the doctor looks whether every stream has its first outcome.
STREAM_POLL_SECONDS = 0.2

NOTES = (
    "read-only: nothing was stopped, destroyed, recorded in your database or sent",
    "time-based rules start their clocks at this one observation; the daemon, with its "
    "history, may be further along",
)


def run_doctor(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    *,
    runner: CommandRunner | None = None,
    transport_for: TransportFactory | None = None,
) -> DoctorReport:
    """Examine every configured account (see the module docstring). Raises ConfigError for an
    unusable SSH key or notification URL found while building, StoreError when the temporary
    database cannot be made."""
    settings = with_capped_retries(settings)
    pins, pins_note = daemon_host_keys(settings.watchdog.effective_database_url(environ))
    with tempfile.TemporaryDirectory(prefix="watchdog-gpu-doctor-") as directory:
        store = open_store(sqlite_url(Path(directory) / "doctor.db"))
        try:
            for (account, instance_id), (key_type, key_base64) in pins.items():
                store.pin_host_key(account, instance_id, key_type, key_base64, clock.now())
            assembly = assemble(
                settings,
                clock,
                environ,
                store=store,
                transport_for=transport_for,
                runner=runner,
                claimer="doctor",
            )
            try:
                report = _examine(settings, assembly, clock, given_runner=runner is not None)
                return replace(report, notes=(*report.notes, pins_note))
            finally:
                assembly.close()
        finally:
            store.engine.dispose()


def daemon_host_keys(url: str) -> tuple[dict[tuple[str, str], tuple[str, str]], str]:
    """The SSH host keys the daemon pinned in its database at ``url`` — read only: never
    created or migrated — and a note saying what the probes were checked against. A database
    that is missing or cannot be read leaves no pins (each host then trusted on first use for
    this run), which the note says."""
    shown = display_url(url)
    path = sqlite_file(url)
    if path is not None and not path.is_file():  # the engine would create it
        return {}, f"SSH host keys: trusted on first use (no database {shown} yet)"
    try:
        engine = create_engine_for(url)
        try:
            pins = Store(engine).pinned_host_keys()
        finally:
            engine.dispose()
    except (StoreError, OSError) as error:
        return {}, f"SSH host keys: trusted on first use (the daemon's pins unreadable: {error})"
    return pins, f"SSH host keys: checked against the {len(pins)} the daemon pinned in {shown}"


def _examine(
    settings: Settings, assembly: Assembly, clock: Clock, *, given_runner: bool
) -> DoctorReport:
    now = clock.now()
    observations, failures = _observe(assembly, now)
    now, probes = _probe(settings, assembly, clock, now)
    watchdog = assembly.watchdog
    tick = TickReport(now)
    watchdog.evaluate(now, tick)
    accounts = []
    evidence = settings.evidence()
    for account in settings.accounts:
        failure = failures.get(account.name)
        accounts.append(
            account_report(
                account.name,
                account.provider,
                observations.get(account.name),
                error_kind=failure.kind if failure is not None else None,
                error=str(failure) if failure is not None else "",
                probes=probes.get(account.name),
                not_probed=_not_probed(settings, assembly, account.name, given_runner=given_runner),
                gpu_evidence=evidence[account.name].summary,
            )
        )
    mode_note = (
        ("monitor mode: the daemon would warn and log these, never stop or destroy",)
        if settings.watchdog.mode == "monitor"
        else ()
    )
    return DoctorReport(
        at=now,
        mode=settings.watchdog.mode,
        accounts=tuple(accounts),
        verdicts=rule_verdicts(tick.plan.decisions if tick.plan is not None else ()),
        failed_rules=dict(tick.failed_rules),
        notes=NOTES + mode_note,
    )


def _observe(
    assembly: Assembly, now: datetime
) -> tuple[dict[str, AccountObservation], dict[str, ProviderError]]:
    """Each account listed once, recorded as the daemon records a poll: what it holds, or why
    it could not be read."""
    store = assembly.watchdog.store
    observations: dict[str, AccountObservation] = {}
    failures: dict[str, ProviderError] = {}
    for name, provider in assembly.providers.items():
        try:
            observation = provider.observe(now)
        except ProviderError as error:
            failures[name] = error
            store.record_poll_failure(name, provider.name, error.kind, str(error), now)
            continue
        store.record_observation(observation, now)
        observations[name] = observation
    return observations, failures


def _probe(
    settings: Settings, assembly: Assembly, clock: Clock, now: datetime
) -> tuple[datetime, dict[str, dict[str, ProbeOutcome]]]:
    """The instances probed once at ``now`` (a stream awaited to its first rows): when they
    were read, and each account's outcomes by instance id."""
    outcomes = assembly.watchdog.probe(now)
    if assembly.streams is not None and outcomes:
        # The first round only started the streams ("the stream is starting"): wait for each
        # one's first rows or failure, then read them.
        await_first_outcomes(assembly.streams, clock, stream_wait(settings))
        now = clock.now()
        outcomes = assembly.watchdog.probe(now)
    probes: dict[str, dict[str, ProbeOutcome]] = {}
    for outcome in outcomes:
        probes.setdefault(outcome.account, {})[outcome.instance_id] = outcome
    return now, probes


def _not_probed(settings: Settings, assembly: Assembly, account: str, *, given_runner: bool) -> str:
    """Why a running instance of ``account`` with an SSH endpoint has no probe ("" if it
    should have one). ``given_runner``: the caller's runner probes every account (tests)."""
    if not settings.probe.enabled:
        return "probe disabled ([probe] enabled = false)"
    if assembly.prober is None:
        return "no SSH key configured: the watchdog cannot see GPU activity"
    config = next(a for a in settings.accounts if a.name == account)
    if not config.ssh.has_authentication and not given_runner:
        return "no SSH key configured for this account"
    return ""


def with_capped_retries(settings: Settings) -> Settings:
    """``settings`` with every account's ``retry_budget`` at most ``DOCTOR_RETRY_BUDGET``."""
    accounts = [
        account.model_copy(update={"retry_budget": min(account.retry_budget, DOCTOR_RETRY_BUDGET)})
        for account in settings.accounts
    ]
    return settings.model_copy(update={"accounts": accounts})


def stream_wait(settings: Settings) -> float:
    """The longest wait for a stream's first outcome: a connection's every step may take its
    whole timeout, then the rows may take up to ``stall_after`` (which ends a silent session)."""
    probe = settings.probe
    steps = (probe.connect_timeout, probe.banner_timeout, probe.auth_timeout, probe.stall_after)
    return sum(step.total_seconds() for step in steps)


def await_first_outcomes(streams: StreamSource, clock: Clock, limit_seconds: float) -> None:
    """Return once no stream is still connecting (each streams rows, failed, stalled or fell
    back to burst mode), or after ``limit_seconds``."""
    deadline = clock.monotonic() + limit_seconds
    while clock.monotonic() < deadline:
        states = [health.state for health in streams.health().values()]
        if StreamState.CONNECTING not in states:
            return
        clock.sleep(STREAM_POLL_SECONDS)
