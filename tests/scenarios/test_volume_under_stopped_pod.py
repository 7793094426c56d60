"""Scenario: a network volume under a stopped pod (volume_under_stopped_pod.toml).

A stopped pod does not use its network volume, which bills on its own whatever the pod does: the
volume is detached from the stop, and volume_storage tells it once it has billed so for its
``after`` — not never, as when a stopped pod counted as attaching it.
"""

from __future__ import annotations

from pathlib import Path

from tests.scenarios.helpers import ENFORCE, assert_within_tick, offset, run_scenario, tick_seconds

NAME = "volume_under_stopped_pod"
AFTER_ONE_DAY = f'{ENFORCE}\n[rules.volume_storage]\nafter = "1d"\n'


def test_a_volume_under_a_pod_stopped_for_days_is_alerted_a_day_after_the_stop(
    tmp_path: Path,
) -> None:
    run = run_scenario(NAME, tmp_path, AFTER_ONE_DAY)

    ((at, note),) = [(at, note) for at, note in run.sent if note.rule == "volume_storage"]
    # Detached from the first poll after the stop at 1h; told `after` later.
    assert_within_tick(at, offset("1h") + offset("1d"), tick_seconds(NAME))
    assert "corpus" in note.title
    assert f"${2000 * 0.06 / 730:.3f}/h" in note.body
    assert run.actions == []  # the pod bills nothing stopped; the volume is the owner's call
    assert run.instances["runpod-lab/stoppedpod001"]["final_state"] == "stopped"
