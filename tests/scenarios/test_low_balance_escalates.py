"""Scenario: a low balance that escalates to critical, then is topped up
(low_balance_escalates.toml).

An escalation is not a resolution: nothing says "Resolved" at the tick the critical alert goes
out, only when the balance is fine again.
"""

from __future__ import annotations

from pathlib import Path

from tests.scenarios.helpers import offset, run_scenario

NAME = "low_balance_escalates"
ESCALATED = offset("30m")
TOPPED_UP = offset("1h")


def test_an_escalation_to_critical_is_not_a_resolution(tmp_path: Path) -> None:
    run = run_scenario(NAME, tmp_path, None)
    timeline = [
        (offset_s, note.severity.value, note.title.startswith("Resolved"))
        for offset_s, note in run.sent
        if note.rule == "low_balance"
    ]
    alerts = [(offset_s, severity) for offset_s, severity, resolved in timeline if not resolved]
    assert alerts == [(0, "warning"), (ESCALATED, "critical")]
    resolved_at = {offset_s for offset_s, _, resolved in timeline if resolved}
    assert resolved_at == {TOPPED_UP}, timeline
    # the all-clear is one push, whichever severities the day's episodes had
    pushes = {n["push"] for n in run.notifications if n["title"].startswith("Resolved")}
    assert len(pushes) == 1
