"""The pure renderer: every message names the instance, the rule, the evidence, the dollars, what
happens next and how to stop it, and carries the episode's idempotency key."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog_gpu.model import ActionKind, Finding, PlannedAction, Severity
from watchdog_gpu.notify.render import (
    MONITOR_MARKER,
    ActionOutcome,
    format_clock,
    format_duration,
    format_evidence,
    format_rate,
    format_until,
    format_usd,
    notification_key,
    render_action_result,
    render_alert,
    render_escalation,
    render_resolution,
    render_test,
    render_warning,
)

NOW = datetime(2026, 12, 2, 22, 20, tzinfo=UTC)


def idle_finding(**changes: object) -> Finding:
    finding = Finding(
        rule="idle_gpu",
        account="vast-main",
        instance_id="9001",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="all 2 GPUs idle for 42 min",
        episode_started_at=NOW - timedelta(minutes=42),
        due_at=NOW + timedelta(minutes=10),
        evidence={"idle_minutes": 42, "coverage": 0.97, "usd_so_far": 2.15},
        usd_per_hour_at_stake=0.37,
    )
    return replace(finding, **changes)  # type: ignore[arg-type]


def low_balance_finding() -> Finding:
    return Finding(
        rule="low_balance",
        account="runpod-lab",
        instance_id=None,
        severity=Severity.CRITICAL,
        action=ActionKind.NOTIFY,
        summary="balance $4.20, runway 3 h",
        episode_started_at=NOW,
        due_at=NOW,
        evidence={"balance_usd": 4.2, "runway_hours": 3.1},
    )


def test_a_warning_names_instance_rule_evidence_dollars_deadline_and_commands() -> None:
    finding = idle_finding()

    message = render_warning(
        finding, due_at=finding.due_at, action=ActionKind.DESTROY, dry_run=False, now=NOW
    )

    assert message.severity is Severity.WARNING
    assert message.idempotency_key == f"{finding.episode_key}:warning"
    assert "vast-main/9001" in message.title
    assert "idle_gpu" in message.title
    assert "in 10 min" in message.title
    assert "idle_minutes=42, coverage=0.97" in message.body
    assert "$0.37/h, $2.15 so far" in message.body
    assert "will be destroyed at 22:30 UTC (in 10 min)" in message.body
    assert "watchdog-gpu snooze vast-main/9001 --for 2h" in message.body
    assert "watchdog-gpu protect vast-main/9001" in message.body
    assert MONITOR_MARKER not in message.body
    assert (message.rule, message.account, message.instance_id) == ("idle_gpu", "vast-main", "9001")
    assert message.created_at == NOW


def test_a_monitor_mode_warning_is_marked_and_says_what_would_happen() -> None:
    finding = idle_finding()

    message = render_warning(
        finding, due_at=finding.due_at, action=ActionKind.DESTROY, dry_run=True, now=NOW
    )

    assert message.body.splitlines()[0] == "[monitor mode: nothing will be changed]"
    assert message.title.startswith("[monitor] ")
    assert "would be destroyed at 22:30 UTC (in 10 min)" in message.body
    assert "will be destroyed at" not in message.body


def test_a_warning_for_a_stop_says_stopped_and_uses_the_given_snooze_length() -> None:
    finding = idle_finding(rule="stopped_disk")

    message = render_warning(
        finding,
        due_at=NOW + timedelta(hours=1, minutes=5),
        action=ActionKind.STOP,
        dry_run=False,
        now=NOW,
        snooze_for="30m",
    )

    assert "will be stopped at 23:25 UTC (in 1 h 5 min)" in message.body
    assert "--for 30m" in message.body


def test_a_deadline_on_another_day_shows_its_date() -> None:
    finding = idle_finding()

    message = render_warning(
        finding,
        due_at=NOW + timedelta(days=1, hours=2),
        action=ActionKind.DESTROY,
        dry_run=False,
        now=NOW,
    )

    assert "at 2026-12-04 00:20 UTC (in 1 d 2 h)" in message.body


def test_an_unknown_cost_reads_as_unknown_never_as_zero() -> None:
    finding = idle_finding(usd_per_hour_at_stake=None, evidence={"idle_minutes": 42})

    message = render_warning(
        finding, due_at=finding.due_at, action=ActionKind.DESTROY, dry_run=False, now=NOW
    )

    assert "Cost: cost unknown" in message.body
    assert "$0.00" not in message.body


def test_an_explicit_so_far_amount_wins_over_the_evidence() -> None:
    finding = idle_finding()

    message = render_warning(
        finding,
        due_at=finding.due_at,
        action=ActionKind.DESTROY,
        dry_run=False,
        now=NOW,
        usd_so_far=7.5,
    )

    assert "$0.37/h, $7.50 so far" in message.body


def test_a_notify_only_finding_cannot_be_warned_about_as_a_kill() -> None:
    with pytest.raises(ValueError, match="notify-only"):
        render_warning(
            low_balance_finding(), due_at=NOW, action=ActionKind.NOTIFY, dry_run=False, now=NOW
        )
    with pytest.raises(ValueError, match="notify-only"):
        render_action_result(low_balance_finding(), outcome=ActionOutcome.FAILED, now=NOW)


@pytest.mark.parametrize(
    ("outcome", "severity", "suffix", "phrase"),
    [
        (ActionOutcome.VERIFIED, Severity.WARNING, "action", "verified gone"),
        (ActionOutcome.UNVERIFIED, Severity.CRITICAL, "action", "does not list it as gone yet"),
        (
            ActionOutcome.FAILED,
            Severity.CRITICAL,
            "action",
            "nothing more from watchdog-gpu (final)",
        ),
        (ActionOutcome.RETRYING, Severity.CRITICAL, "refused", "retried with backoff while"),
        (
            ActionOutcome.AWAITING_ACCOUNT,
            Severity.CRITICAL,
            "refused",
            "called again as soon as the account can be read again",
        ),
        (ActionOutcome.HELD, Severity.CRITICAL, "action", "Salvage before the destroy failed"),
        (ActionOutcome.BLOCKED, Severity.CRITICAL, "blocked", "blast-radius fuse refused"),
        (ActionOutcome.DRY_RUN, Severity.WARNING, "action", "would have been destroyed"),
    ],
)
def test_each_action_outcome_has_its_severity_key_and_wording(
    outcome: ActionOutcome, severity: Severity, suffix: str, phrase: str
) -> None:
    finding = idle_finding()

    message = render_action_result(finding, outcome=outcome, now=NOW, detail="HTTP 502")

    assert message.severity is severity
    assert message.idempotency_key == f"{finding.episode_key}:{suffix}"
    assert phrase in message.body
    assert "Detail: HTTP 502" in message.body
    assert "$0.37/h" in message.body
    assert (MONITOR_MARKER in message.body) is (outcome is ActionOutcome.DRY_RUN)


def test_an_unverified_kill_says_the_dollars_are_still_burning() -> None:
    message = render_action_result(idle_finding(), outcome=ActionOutcome.UNVERIFIED, now=NOW)

    assert "$0.37/h may burn" in message.title
    assert "$0.37/h, $2.15 so far" in message.body


def test_a_held_or_blocked_kill_tells_how_to_keep_the_instance() -> None:
    for outcome in (ActionOutcome.HELD, ActionOutcome.BLOCKED):
        message = render_action_result(idle_finding(), outcome=outcome, now=NOW)
        assert "watchdog-gpu protect vast-main/9001" in message.body


def test_an_action_result_can_be_rendered_from_the_planned_action_alone() -> None:
    action = PlannedAction(
        idempotency_key="paused_interruptible:vast-main/77:2026-12-02T21:00:00+00:00",
        account="vast-main",
        instance_id="77",
        rule="paused_interruptible",
        kind=ActionKind.STOP,
        dry_run=False,
        reason="paused (outbid) for 31 min",
        planned_at=NOW,
        episode_key="paused_interruptible:vast-main/77:2026-12-02T21:00:00+00:00",
        evidence={"paused_minutes": 31},
        usd_per_hour_at_stake=0.014,
    )

    message = render_action_result(action, outcome=ActionOutcome.VERIFIED, now=NOW)
    explicit = render_action_result(
        action, outcome=ActionOutcome.VERIFIED, now=NOW, episode_key="episode-1"
    )

    assert message.idempotency_key == f"{action.idempotency_key}:action"
    assert explicit.idempotency_key == "episode-1:action"
    assert "Stopped vast-main/77" in message.title
    assert "paused (outbid) for 31 min" in message.body
    assert "verified stopped (its disk still bills)" in message.body
    assert "was $0.014/h" in message.body


def test_an_escalation_is_numbered_and_counts_the_dollars_since_the_kill() -> None:
    finding = idle_finding()

    message = render_escalation(
        finding, number=2, acted_at=NOW - timedelta(minutes=20), now=NOW, detail="still running"
    )

    assert message.severity is Severity.CRITICAL
    assert message.idempotency_key == f"{finding.episode_key}:escalation:2"
    assert "still billing 20 min after destroy (#2)" in message.title
    # $0.37/h for 20 minutes is $0.123
    assert "Cost: $0.37/h, about $0.12 since the destroy call." in message.body
    assert "went out at 22:00 UTC (20 min ago)" in message.body
    with pytest.raises(ValueError, match="from 1"):
        render_escalation(finding, number=0, acted_at=NOW, now=NOW)


def test_an_escalation_of_a_held_call_says_it_was_not_called() -> None:
    finding = idle_finding()

    message = render_escalation(
        finding,
        number=1,
        acted_at=NOW - timedelta(minutes=12),
        now=NOW,
        detail="the provider lists it running, not paused as decided",
        called=False,
    )

    assert "still billing 12 min after planned destroy (#1)" in message.title
    assert "went out" not in message.body
    assert "planned at 22:08 UTC (12 min ago) and has not been called" in message.body
    assert "since the planned destroy." in message.body
    assert "lists it running, not paused as decided" in message.body


def test_a_resolution_is_info_and_says_the_planned_kill_is_cancelled() -> None:
    finding = idle_finding()

    message = render_resolution(finding, reason="GPU busy again", now=NOW, action_cancelled=True)

    assert message.severity is Severity.INFO
    assert message.idempotency_key == f"{finding.episode_key}:resolution"
    assert "Cleared: GPU busy again." in message.body
    assert "the planned destroy is cancelled" in message.body


def test_an_alert_uses_the_findings_severity_and_promises_no_automatic_change() -> None:
    finding = low_balance_finding()

    message = render_alert(finding, now=NOW)

    assert message.severity is Severity.CRITICAL
    assert message.idempotency_key == f"{finding.episode_key}:alert"
    assert message.title == "runpod-lab low_balance: balance $4.20, runway 3 h"
    assert "balance_usd=4.2, runway_hours=3.1" in message.body
    assert "nothing changes automatically" in message.body
    assert "snooze" not in message.body
    assert message.instance_id is None


def test_a_protected_instance_report_says_it_keeps_billing_and_how_to_unprotect() -> None:
    finding = idle_finding(rule="budget", severity=Severity.CRITICAL, summary="daily ceiling hit")

    message = render_alert(finding, now=NOW, protected=True)

    assert message.severity is Severity.CRITICAL
    assert "will not stop or destroy it; it keeps billing" in message.body
    assert "watchdog-gpu unprotect vast-main/9001" in message.body


def test_every_message_of_one_episode_has_its_own_key_and_a_recurrence_gets_new_ones() -> None:
    first = idle_finding()
    recurrence = idle_finding(episode_started_at=NOW)

    def keys(finding: Finding) -> list[str]:
        return [
            render_warning(
                finding, due_at=NOW, action=ActionKind.DESTROY, dry_run=False, now=NOW
            ).idempotency_key,
            render_action_result(finding, outcome=ActionOutcome.VERIFIED, now=NOW).idempotency_key,
            render_action_result(finding, outcome=ActionOutcome.BLOCKED, now=NOW).idempotency_key,
            render_resolution(finding, reason="gone", now=NOW).idempotency_key,
            render_escalation(finding, number=1, acted_at=NOW, now=NOW).idempotency_key,
        ]

    assert len(set(keys(first))) == 5
    assert not set(keys(first)) & set(keys(recurrence))
    assert notification_key("e", "escalation", 3) == "e:escalation:3"


def test_provider_supplied_names_cannot_break_lines_and_ids_are_shell_quoted() -> None:
    finding = idle_finding(
        instance_id="9001; rm -rf ~",
        evidence={"instance_name": "train\nFAKE: line\x1b[31m", "usd_so_far": 1.0},
    )

    message = render_warning(
        finding, due_at=finding.due_at, action=ActionKind.DESTROY, dry_run=False, now=NOW
    )

    assert "\n" not in message.title
    assert '"train FAKE: line [31m"' in message.body
    assert "\x1b" not in message.body
    assert "watchdog-gpu protect 'vast-main/9001; rm -rf ~'" in message.body


def test_the_test_message_is_info_and_unique_per_send() -> None:
    first, second = render_test(NOW), render_test(NOW + timedelta(seconds=1))

    assert first.severity is Severity.INFO
    assert first.idempotency_key != second.idempotency_key
    assert "notify test" in first.body


def test_evidence_is_compact_and_unknown_values_read_as_unknown() -> None:
    evidence: dict[str, str | int | float | bool | None] = {f"k{i}": i for i in range(10)}
    evidence.update({"ssh": False, "util": None, "usd_so_far": 3.0})

    text = format_evidence(evidence)

    assert text.startswith("k0=0, k1=1")
    assert text.endswith("(+4 more)")
    assert format_evidence({"ssh": False, "util": None}) == "ssh=no, util=unknown"


def test_money_and_time_formats() -> None:
    assert format_usd(2.149) == "$2.15"
    assert format_usd(0.0137) == "$0.014"
    assert format_usd(1234.5) == "$1,234.50"
    assert format_rate(None) == "cost unknown"
    assert format_duration(timedelta(seconds=30)) == "under a minute"
    assert format_duration(timedelta(days=2)) == "2 d"
    assert format_duration(timedelta(hours=3)) == "3 h"
    # a deadline 9.5 minutes away reads "in 10 min": never later than the truth
    assert format_until(NOW + timedelta(minutes=9, seconds=30), NOW) == "in 10 min"
    assert format_until(NOW - timedelta(minutes=1), NOW) == "now"
    assert format_until(NOW + timedelta(seconds=20), NOW) == "in under a minute"


@given(summary=st.text(max_size=400), name=st.text(max_size=200))
def test_titles_are_always_one_short_line(summary: str, name: str) -> None:
    finding = idle_finding(summary=summary, evidence={"instance_name": name})

    messages = [
        render_warning(finding, due_at=NOW, action=ActionKind.DESTROY, dry_run=True, now=NOW),
        render_alert(finding, now=NOW),
        render_action_result(finding, outcome=ActionOutcome.UNVERIFIED, now=NOW),
    ]

    for message in messages:
        assert len(message.title) <= 120
        assert message.title.isprintable()


def test_a_clock_time_carries_its_date_only_on_another_utc_day() -> None:
    now = datetime(2026, 12, 3, 23, 59, tzinfo=UTC)
    assert format_clock(now - timedelta(hours=1, minutes=29), now) == "22:30 UTC"
    assert format_clock(now + timedelta(minutes=2), now) == "2026-12-04 00:01 UTC"
    paris = timezone(timedelta(hours=1))
    assert format_clock(datetime(2026, 12, 4, 0, 5, tzinfo=paris), now) == "23:05 UTC"
    assert format_clock(datetime(2026, 3, 1, 7, 5, tzinfo=UTC), now) == "2026-03-01 07:05 UTC"
