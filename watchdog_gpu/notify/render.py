"""Pure message rendering: a finding (or a planned action) and what happens next → a message.

The planner and the executor write the returned
:class:`~watchdog_gpu.model.PlannedNotification` to the outbox; delivery happens later. ``now``
is always a parameter. What a message says and its idempotency keys: ``docs/safety.md``,
"Notifications". The episode key of a :class:`~watchdog_gpu.model.PlannedAction` is its
``idempotency_key`` unless the caller passes ``episode_key=``. Evidence keys read here:
``usd_so_far`` and ``instance_name``; everything else is listed as evidence.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from watchdog_gpu.evidence import EVIDENCE_WEAK, OPT_IN
from watchdog_gpu.model import ActionKind, Finding, PlannedAction, PlannedNotification, Severity

MONITOR_MARKER = "[monitor mode: nothing will be changed]"
DEFAULT_SNOOZE = "2h"
EVIDENCE_USD_SO_FAR = "usd_so_far"
EVIDENCE_INSTANCE_NAME = "instance_name"

_TITLE_LIMIT = 120
_EVIDENCE_ITEMS_LIMIT = 8
_EVIDENCE_VALUE_LIMIT = 60
_DETAIL_LIMIT = 300
_RESERVED_EVIDENCE = frozenset({EVIDENCE_USD_SO_FAR, EVIDENCE_INSTANCE_NAME})

Evidence = Mapping[str, str | int | float | bool | None]
Subject = Finding | PlannedAction


class ActionOutcome(StrEnum):
    """How a stop/destroy ended, as far as the message is concerned."""

    VERIFIED = "verified"  # the re-listing shows it gone (or stopped for a stop)
    UNVERIFIED = "unverified"  # the call went out, the listing still shows it billing
    FAILED = "failed"  # the provider refused the call repeatedly: given up (final)
    RETRYING = "retrying"  # the provider refused the call: it is retried a bounded number of times
    # The provider refused the account's key: retried once the account reads again, not given up
    AWAITING_ACCOUNT = "awaiting_account"
    HELD = "held"  # salvage failed and on_failure = "hold": kept, a human decides
    BLOCKED = "blocked"  # the blast-radius fuse refused it
    DRY_RUN = "dry_run"  # monitor mode: decided and recorded, nothing changed


def notification_key(episode_key: str, kind: str, number: int | None = None) -> str:
    """The outbox idempotency key for message ``kind`` of an episode (``n`` for escalations)."""
    return f"{episode_key}:{kind}" if number is None else f"{episode_key}:{kind}:{number}"


def render_warning(
    finding: Finding,
    *,
    due_at: datetime,
    action: ActionKind,
    dry_run: bool,
    now: datetime,
    usd_so_far: float | None = None,
    snooze_for: str = DEFAULT_SNOOZE,
    key: str | None = None,
) -> PlannedNotification:
    """The grace warning sent ``warn_before`` ahead of a stop/destroy (severity warning).

    Given the finding, when the action is due (the planner may have moved it, e.g. after a
    snooze), the action, the mode and ``now``. ``usd_so_far`` overrides the finding's
    ``usd_so_far`` evidence. Raises ValueError for ``ActionKind.NOTIFY`` (nothing to warn about).
    """
    verb = _past_participle(action)
    lines = _preamble(finding, dry_run)
    lines.append(_cost_line(finding.usd_per_hour_at_stake, _so_far(finding, usd_so_far)))
    when = f"at {format_clock(due_at, now)} ({format_until(due_at, now)})"
    target = "it" if finding.instance_id else f"billing instances of {finding.account}"
    if dry_run:
        lines.append(f"Next: in enforce mode {target} would be {verb} {when}.")
    else:
        lines.append(f"Next: {target} will be {verb} {when}.")
    lines.extend(_keep_commands(finding.account, finding.instance_id, snooze_for))
    title = f"{finding.subject} will be {verb} {format_until(due_at, now)}: {finding.rule}"
    return _notification(
        finding,
        "warning",
        severity=Severity.WARNING,
        title=title,
        lines=lines,
        now=now,
        dry_run=dry_run,
        episode=None,
        key=key,
    )


def render_action_result(
    subject: Subject,
    *,
    outcome: ActionOutcome,
    now: datetime,
    detail: str = "",
    usd_so_far: float | None = None,
    episode_key: str | None = None,
    snooze_for: str = DEFAULT_SNOOZE,
) -> PlannedNotification:
    """The message after the executor (or the fuse) dealt with a stop/destroy.

    Given the finding or the planned action, the outcome, ``now`` and an optional ``detail``
    (the provider's error, the salvage failure, the fuse limit: human text, never a secret; it is
    shortened). Severity: warning for VERIFIED and DRY_RUN, critical for the rest (money may still
    be burning and a human is needed). Raises ValueError for a subject whose action is NOTIFY.
    """
    action = _action_of(subject)
    verb, infinitive = _past_participle(action), action.value
    dry_run = outcome is ActionOutcome.DRY_RUN
    name = _subject_name(subject)
    rate = subject.usd_per_hour_at_stake
    lines = _preamble(subject, dry_run)
    kind, severity = "action", Severity.CRITICAL
    if outcome is ActionOutcome.VERIFIED:
        severity = Severity.WARNING
        title = f"{verb.capitalize()} {name}: {subject.rule}"
        done = "gone" if action is ActionKind.DESTROY else "stopped (its disk still bills)"
        lines.append(f"Done: {verb} at {format_clock(now, now)}; verified {done}.")
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far), rate_label="was"))
    elif outcome is ActionOutcome.DRY_RUN:
        severity = Severity.WARNING
        title = f"Would have {verb} {name}: {subject.rule}"
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far)))
        lines.append(f"Next: nothing. In enforce mode it would have been {verb} now.")
    elif outcome is ActionOutcome.UNVERIFIED:
        title = f"{infinitive.capitalize()} of {name} not verified: {format_rate(rate)} may burn"
        lines.append(
            f"The {infinitive} call went out at {format_clock(now, now)} but the provider "
            f"does not list it as {_target_state(action)} yet."
        )
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far)))
        lines.append("Next: re-checking with backoff; you will hear again if it keeps billing.")
    elif outcome is ActionOutcome.FAILED:
        title = f"Gave up trying to {infinitive} {name}: {subject.rule}"
        lines.append(f"The provider refused the {infinitive} call again; it keeps billing.")
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far)))
        lines.append(
            f"Next: nothing more from watchdog-gpu (final): the provider refuses this call for "
            f"a reason waiting does not change. {infinitive.capitalize()} it in the provider "
            "console."
        )
    elif outcome in (ActionOutcome.RETRYING, ActionOutcome.AWAITING_ACCOUNT):
        kind = "refused"
        title, refused, then = _refusal(outcome, infinitive, name, subject.rule)
        lines.extend((refused, _cost_line(rate, _so_far(subject, usd_so_far)), then))
    elif outcome is ActionOutcome.HELD:
        title = f"Holding {name}: salvage failed, not {verb}"
        lines.append(f"Salvage before the {infinitive} failed, so it was kept; it keeps billing.")
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far)))
        lines.append(f"Next: nothing until you decide: {infinitive} it yourself or protect it.")
    else:  # BLOCKED
        kind = "blocked"
        title = f"Fuse tripped: {name} not {verb}"
        lines.append(
            f"The blast-radius fuse refused this {infinitive}; destructive actions wait for "
            "a human. It keeps billing."
        )
        lines.append(_cost_line(rate, _so_far(subject, usd_so_far)))
    if detail:
        lines.append(f"Detail: {_clean(detail, _DETAIL_LIMIT)}")
    if outcome in (ActionOutcome.HELD, ActionOutcome.BLOCKED, ActionOutcome.DRY_RUN):
        lines.extend(_keep_commands(subject.account, subject.instance_id, snooze_for))
    return _notification(
        subject,
        kind,
        severity=severity,
        title=title,
        lines=lines,
        now=now,
        dry_run=dry_run,
        episode=episode_key,
    )


def _refusal(outcome: ActionOutcome, infinitive: str, name: str, rule: str) -> tuple[str, str, str]:
    """Title, what happened and what happens next for a refused call: a refused API key waits
    for the account to read again and is never given up; another refusal is retried a few
    times."""
    if outcome is ActionOutcome.AWAITING_ACCOUNT:
        return (
            f"Could not {infinitive} {name}: API key refused ({rule})",
            f"The provider refused the account's API key for the {infinitive} call; "
            "it keeps billing.",
            f"Next: the {infinitive} is called again as soon as the account can be read again "
            "(checked every few minutes), for as long as the instance bills and its condition "
            "holds; it is not given up, and you will hear again if it drags on. Fix the "
            f"account's API key, or {infinitive} it in the provider console.",
        )
    return (
        f"Could not {infinitive} {name}: {rule}",
        f"The provider refused the {infinitive} call; it keeps billing.",
        "Next: retried with backoff while the condition still holds, a few times at most; "
        "you will hear when it is given up. Check the provider console.",
    )


def render_resolution(
    subject: Subject,
    *,
    reason: str,
    now: datetime,
    action_cancelled: bool = False,
    dry_run: bool = False,
    episode_key: str | None = None,
    key: str | None = None,
) -> PlannedNotification:
    """The message that closes an episode: the condition cleared (severity info).

    ``reason`` says how, in a few words ("GPU busy again", "instance gone", "balance back above
    $20"). ``action_cancelled`` adds that the warned-about stop/destroy will not happen: the
    warning is withdrawn. ``key`` overrides the idempotency key (a second withdrawal of the same
    episode, see ``watchdog_gpu.notices``).
    """
    lines = _preamble(subject, dry_run)
    lines.append(f"Cleared: {_clean(reason, _DETAIL_LIMIT)}.")
    action = _action_of_or_none(subject)
    if action_cancelled and action is not None:
        lines.append(f"Next: nothing; the planned {action.value} is cancelled.")
    else:
        lines.append("Next: nothing for this episode.")
    title = f"Resolved: {_subject_name(subject)} ({subject.rule})"
    return _notification(
        subject,
        "resolution",
        severity=Severity.INFO,
        title=title,
        lines=lines,
        now=now,
        dry_run=dry_run,
        episode=episode_key,
        key=key,
    )


def render_alert(
    finding: Finding,
    *,
    now: datetime,
    dry_run: bool = False,
    protected: bool = False,
) -> PlannedNotification:
    """A notify-only finding (low balance, blind time, volume, hygiene), or a finding about a
    protected instance (e.g. the budget rule's critical report), at the finding's severity.

    ``protected`` says the instance is protected: nothing will stop it and it keeps billing.
    """
    lines = _preamble(finding, dry_run)
    if finding.usd_per_hour_at_stake is not None or _so_far(finding, None) is not None:
        lines.append(_cost_line(finding.usd_per_hour_at_stake, _so_far(finding, None)))
    if protected:
        lines.append("Protected: watchdog-gpu will not stop or destroy it; it keeps billing.")
        if finding.instance_id:
            lines.append(
                "Allow actions: watchdog-gpu unprotect "
                + shlex.quote(f"{finding.account}/{finding.instance_id}")
            )
    elif finding.evidence.get(EVIDENCE_WEAK) is True:
        # Evidence that cannot prove idle (evidence.py): say what keeps it, and what lets it act.
        lines.append(
            "Next: not destroyed on this evidence; budget and time limits still apply. "
            "Stop it yourself if it is idle."
        )
        lines.extend(_keep_commands(finding.account, finding.instance_id, DEFAULT_SNOOZE))
        lines.append(
            f"Let the provider's reading prove idle: set {OPT_IN} on account "
            f"{finding.account!r} (a GPU busy in short bursts between polls then reads idle)"
        )
    else:
        lines.append("Next: nothing changes automatically; this is for you to act on.")
    title = f"{_subject_name(finding)} {finding.rule}: {_clean(finding.summary, _TITLE_LIMIT)}"
    return _notification(
        finding,
        "alert",
        severity=finding.severity,
        title=title,
        lines=lines,
        now=now,
        dry_run=dry_run,
        episode=None,
    )


def render_escalation(
    subject: Subject,
    *,
    number: int,
    acted_at: datetime,
    now: datetime,
    detail: str = "",
    episode_key: str | None = None,
    called: bool = True,
) -> PlannedNotification:
    """Escalation ``number`` (1, 2, …) of a kill the provider still lists as billing (critical).

    ``acted_at`` is when the stop/destroy call went out (``called``), or, when it has not gone
    out yet (the executor holds it: the instance's state cannot be confirmed or keeps changing),
    when it was planned; the message carries how long ago that was and roughly what it cost since
    (rate × elapsed).
    """
    if number < 1:
        raise ValueError("escalations are numbered from 1")
    action = _action_of(subject)
    rate = subject.usd_per_hour_at_stake
    elapsed = max(now - acted_at, timedelta(0))
    name = _subject_name(subject)
    lines = _preamble(subject, dry_run=False)
    burned = None if rate is None else rate * elapsed.total_seconds() / 3600
    if called:
        lines.append(
            f"The {action.value} call went out at {format_clock(acted_at, now)} "
            f"({format_duration(elapsed)} ago); the provider has not confirmed it "
            f"{_target_state(action)} yet."
        )
        event = f"the {action.value} call"
    else:
        lines.append(
            f"The {action.value} was planned at {format_clock(acted_at, now)} "
            f"({format_duration(elapsed)} ago) and has not been called: the watchdog holds "
            "it until it can confirm the instance is still as decided."
        )
        event = f"the planned {action.value}"
    since = "unknown" if burned is None else f"about {format_usd(burned)}"
    lines.append(f"Cost: {format_rate(rate)}, {since} since {event}.")
    if detail:
        lines.append(f"Detail: {_clean(detail, _DETAIL_LIMIT)}")
    lines.append(
        f"Next: still checking (and retrying while the condition holds). "
        f"{action.value.capitalize()} it in the provider console."
    )
    after = action.value if called else f"planned {action.value}"
    title = f"{name} still billing {format_duration(elapsed)} after {after} (#{number})"
    key = notification_key(_episode_of(subject, episode_key), "escalation", number)
    return PlannedNotification(
        idempotency_key=key,
        severity=Severity.CRITICAL,
        title=_clean(title, _TITLE_LIMIT),
        body="\n".join(lines),
        created_at=now,
        rule=subject.rule,
        account=subject.account,
        instance_id=subject.instance_id,
    )


def render_batch(items: Sequence[PlannedNotification], now: datetime) -> PlannedNotification:
    """Several messages of one severity as one (one push per route, severity and delivery
    pass): the title counts them and names the first; the body keeps every message whole, so
    each still carries its snooze/protect commands. Raises ValueError for an empty batch or
    mixed severities."""
    if not items:
        raise ValueError("an empty batch")
    severity = items[0].severity
    if any(item.severity is not severity for item in items):
        raise ValueError("a batch holds messages of one severity")
    if len(items) == 1:
        return items[0]
    noun = {Severity.INFO: "updates", Severity.WARNING: "warnings", Severity.CRITICAL: "alerts"}
    title = f"{len(items)} {noun[severity]}: {items[0].title}"
    sections = [f"[{n}/{len(items)}] {item.title}\n{item.body}" for n, item in enumerate(items, 1)]
    return PlannedNotification(
        idempotency_key=f"batch:{items[0].idempotency_key}",
        severity=severity,
        title=_clean(title, _TITLE_LIMIT),
        body="\n\n".join(sections),
        created_at=now,
        items=tuple(items),
    )


def render_test(now: datetime) -> PlannedNotification:
    """The message ``watchdog-gpu notify test`` sends to every route (severity info)."""
    return PlannedNotification(
        idempotency_key=f"test:{now.isoformat()}",
        severity=Severity.INFO,
        title="watchdog-gpu test notification",
        body=(
            f"Sent at {format_clock(now, now)} by `watchdog-gpu notify test`. "
            "If you read this, this route works."
        ),
        created_at=now,
    )


def sent_from(body: str, host: str) -> str:
    """The body as it reaches the phone: its last line names the host the watchdog runs on
    (its ``node_name``, else the host name), so a team with several watchdogs knows which one
    spoke. Every delivered message (and ``notify test``) passes here."""
    return (
        f"{body}\n\nSent by watchdog-gpu on {host}." if body else f"Sent by watchdog-gpu on {host}."
    )


# ---- formatting helpers (public: the CLI's status table uses the same wording) ----


def format_usd(amount: float) -> str:
    """``$2.15``; three decimals under ten cents so a $0.014/h disk does not read as $0.01."""
    if abs(amount) < 0.1 and amount != 0:
        return f"${amount:,.3f}"
    return f"${amount:,.2f}"


def format_rate(usd_per_hour: float | None) -> str:
    """``$0.37/h``, or ``cost unknown`` (unknown is not free)."""
    return "cost unknown" if usd_per_hour is None else f"{format_usd(usd_per_hour)}/h"


def format_clock(at: datetime, now: datetime) -> str:
    """``22:30 UTC`` on the same UTC day as ``now``, else ``2026-12-03 22:30 UTC``."""
    at_utc, now_utc = at.astimezone(UTC), now.astimezone(UTC)
    # Fields, not strftime: status formats a few per instance, and strftime costs 20× more.
    clock = f"{at_utc.hour:02d}:{at_utc.minute:02d} UTC"
    if at_utc.date() == now_utc.date():
        return clock
    return f"{at_utc.year}-{at_utc.month:02d}-{at_utc.day:02d} {clock}"


def format_duration(delta: timedelta) -> str:
    """``42 min``, ``1 h 5 min``, ``2 d 3 h``; under a minute is ``under a minute``."""
    minutes = int(delta.total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {mins} min" if mins else f"{hours} h"
    return f"{mins} min"


def format_until(at: datetime, now: datetime) -> str:
    """``in 10 min``, or ``now`` when ``at`` is not in the future."""
    delta = at - now
    if delta <= timedelta(0):
        return "now"
    if delta < timedelta(minutes=1):
        return "in under a minute"
    # Round up: a warning 9 min 30 s ahead reads "in 10 min", never later than the truth.
    rounded = timedelta(minutes=-(-delta.total_seconds() // 60))
    return f"in {format_duration(rounded)}"


def format_evidence(evidence: Evidence) -> str:
    """``idle_minutes=42, coverage=0.97``: at most eight items, values shortened."""
    items = [(key, value) for key, value in evidence.items() if key not in _RESERVED_EVIDENCE]
    parts = [f"{_clean(key, 40)}={_evidence_value(value)}" for key, value in items]
    if len(parts) > _EVIDENCE_ITEMS_LIMIT:
        hidden = len(parts) - _EVIDENCE_ITEMS_LIMIT
        parts = [*parts[:_EVIDENCE_ITEMS_LIMIT], f"(+{hidden} more)"]
    return ", ".join(parts)


# ---- internals ----


def _notification(
    subject: Subject,
    kind: str,
    *,
    severity: Severity,
    title: str,
    lines: list[str],
    now: datetime,
    dry_run: bool,
    episode: str | None,
    key: str | None = None,
) -> PlannedNotification:
    prefix = "[monitor] " if dry_run else ""
    return PlannedNotification(
        idempotency_key=key or notification_key(_episode_of(subject, episode), kind),
        severity=severity,
        title=_clean(prefix + title, _TITLE_LIMIT),
        body="\n".join(lines),
        created_at=now,
        rule=subject.rule,
        account=subject.account,
        instance_id=subject.instance_id,
    )


def _preamble(subject: Subject, dry_run: bool) -> list[str]:
    """Marker (monitor mode), what and why, evidence."""
    lines = [MONITOR_MARKER] if dry_run else []
    summary = subject.summary if isinstance(subject, Finding) else subject.reason
    lines.append(f"{_subject_name(subject)} — {subject.rule}: {_clean(summary, _DETAIL_LIMIT)}")
    evidence = format_evidence(subject.evidence)
    if evidence:
        lines.append(f"Evidence: {evidence}")
    return lines


def _subject_name(subject: Subject) -> str:
    base = f"{subject.account}/{subject.instance_id}" if subject.instance_id else subject.account
    name = subject.evidence.get(EVIDENCE_INSTANCE_NAME)
    if isinstance(name, str) and name.strip():
        return f'{base} "{_clean(name, 40)}"'
    return base


def _cost_line(rate: float | None, so_far: float | None, rate_label: str = "") -> str:
    rate_text = format_rate(rate)
    if rate_label and rate is not None:
        rate_text = f"{rate_label} {rate_text}"
    if so_far is None:
        return f"Cost: {rate_text}"
    return f"Cost: {rate_text}, {format_usd(so_far)} so far"


def _so_far(subject: Subject, override: float | None) -> float | None:
    if override is not None:
        return override
    value = subject.evidence.get(EVIDENCE_USD_SO_FAR)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _keep_commands(account: str, instance_id: str | None, snooze_for: str) -> list[str]:
    if not instance_id:
        return ["Keep an instance: watchdog-gpu protect ACCOUNT/INSTANCE_ID"]
    # Quoted for a shell: the id comes from the provider, the user pastes the command.
    ref = shlex.quote(f"{account}/{instance_id}")
    return [
        f"Snooze: watchdog-gpu snooze {ref} --for {shlex.quote(snooze_for)}",
        f"Protect: watchdog-gpu protect {ref}",
    ]


def _action_of_or_none(subject: Subject) -> ActionKind | None:
    action = subject.action if isinstance(subject, Finding) else subject.kind
    return None if action is ActionKind.NOTIFY else action


def _action_of(subject: Subject) -> ActionKind:
    action = _action_of_or_none(subject)
    if action is None:
        raise ValueError(f"{subject.rule}: a notify-only subject has no stop/destroy to report")
    return action


def _past_participle(action: ActionKind) -> str:
    if action is ActionKind.DESTROY:
        return "destroyed"
    if action is ActionKind.STOP:
        return "stopped"
    raise ValueError("a notify-only finding has no stop/destroy to warn about")


def _target_state(action: ActionKind) -> str:
    return "gone" if action is ActionKind.DESTROY else "stopped"


def _episode_of(subject: Subject, override: str | None) -> str:
    if override is not None:
        return override
    return subject.episode_key if isinstance(subject, Finding) else subject.idempotency_key


def _evidence_value(value: str | int | float | bool | None) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return _clean(str(value), _EVIDENCE_VALUE_LIMIT)


def _clean(text: str, limit: int) -> str:
    """One line, no control characters (provider-supplied names end up here), at most
    ``limit`` characters."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
