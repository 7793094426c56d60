"""``watchdog-gpu snooze``, ``protect`` and ``unprotect`` against a real SQLite file."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.cli_support import NOW, freeze_clock, isolate, run, write_config
from tests.integration.store_builders import (
    ACCOUNT,
    instance,
    observation,
    planned_action,
)
from watchdog_gpu.fleet import Protection, ProtectionKind
from watchdog_gpu.model import InstanceState
from watchdog_gpu.plan import PlanContext
from watchdog_gpu.protection import protection_for
from watchdog_gpu.safety import SafetyConfig
from watchdog_gpu.store import Store

OTHER = "vast-second"
ACCOUNTS = """
[[accounts]]
name = "vast-main"
provider = "vast"
api_key = { env = "VAST_MAIN_KEY" }

[[accounts]]
name = "vast-second"
provider = "vast"
api_key = { env = "VAST_SECOND_KEY" }
"""


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch)


@pytest.fixture
def db(store: Store, tmp_path: Path) -> Path:
    """vast-main: 101 running, 102 running named keep-me, 103 gone; vast-second: 101, 201."""
    store.record_observation(
        observation(
            instance("101", at=NOW),
            instance("102", at=NOW, name="keep-me"),
            instance("103", at=NOW),
            at=NOW,
        ),
        NOW,
    )
    store.record_observation(  # 103 is not listed any more: gone
        observation(instance("101", at=NOW), instance("102", at=NOW, name="keep-me"), at=NOW),
        NOW,
    )
    store.record_observation(
        observation(
            instance("101", account=OTHER, at=NOW),
            instance("201", account=OTHER, at=NOW),
            account=OTHER,
            at=NOW,
        ),
        NOW,
    )
    return tmp_path / "watchdog-gpu.db"


def is_protected(store: Store, account: str, instance_id: str, name: str = "job") -> bool:
    """What the planner decides from the stored protections."""
    snapshot = instance(instance_id, account=account, name=name)
    context = PlanContext(mode="enforce", rules={}, safety=SafetyConfig())
    return protection_for(snapshot, store.list_protections(), context) is not None


# -- snooze -----------------------------------------------------------------------------------


def test_a_snooze_is_recorded_with_its_expiry_and_an_audit_event(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(
        capsys, "snooze", "vast-main/101", "--for", "2h", "--reason", "eval", "--db", str(db)
    )

    assert result.code == 0
    assert result.out.startswith(
        "snoozed vast-main/101 (job-101) for 2h: no stop or destroy before 16:00 UTC "
        "(2026-03-01T16:00:00Z)"
    )
    [snooze] = store.list_snoozes(NOW)
    assert (snooze.account, snooze.instance_id) == (ACCOUNT, "101")
    assert (snooze.until, snooze.reason) == (NOW + timedelta(hours=2), "eval")
    assert store.list_snoozes(NOW + timedelta(hours=2)) == []  # it expires
    [event] = store.list_audit_events()
    assert (event.kind, event.account, event.instance_id) == ("snoozed", ACCOUNT, "101")
    assert event.data["until"] == "2026-03-01T16:00:00+00:00"
    assert event.data["reason"] == "eval"


def test_a_snooze_longer_than_max_snooze_is_exit_2_naming_the_maximum(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, db, '[safety]\nmax_snooze = "4h"\n')

    too_long = run(capsys, "snooze", "vast-main/101", "--for", "5h", "--config", str(config))
    default_max = run(capsys, "snooze", "vast-main/101", "--for", "25h", "--db", str(db))

    assert too_long.code == 2
    assert "longer than the maximum snooze of 4h ([safety] max_snooze)" in too_long.err
    assert default_max.code == 2
    assert "maximum snooze of 1d (the default)" in default_max.err
    assert store.list_snoozes(NOW) == []
    assert store.list_audit_events() == []
    assert run(capsys, "snooze", "vast-main/101", "--for", "4h", "--config", str(config)).code == 0


def test_a_bare_id_unique_across_accounts_is_enough(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "snooze", "201", "--for", "30m", "--db", str(db))

    assert result.code == 0
    assert [(s.account, s.instance_id) for s in store.list_snoozes(NOW)] == [(OTHER, "201")]


def test_an_ambiguous_bare_id_is_exit_2_listing_the_matches(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "snooze", "101", "--for", "30m", "--db", str(db))

    assert result.code == 2
    assert "instance id '101' is ambiguous" in result.err
    assert "vast-main/101 (job-101)" in result.err
    assert "vast-second/101 (job-101)" in result.err
    assert store.list_snoozes(NOW) == []


def test_an_unknown_instance_is_exit_2_listing_the_known_ids(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "snooze", "vast-main/777", "--for", "30m", "--db", str(db))

    assert result.code == 2
    assert "unknown instance 'vast-main/777'" in result.err
    assert "vast-second/201 (job-201)" in result.err
    assert "vast-main/103 (job-103) [gone]" in result.err


def test_a_gone_instance_cannot_be_snoozed(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "snooze", "vast-main/103", "--for", "30m", "--db", str(db))

    assert result.code == 2
    assert "vast-main/103 (job-103) is gone" in result.err


def test_snoozing_an_instance_whose_destroy_is_under_way_says_it_is_not_recalled(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store.enqueue_action(planned_action("idle:101:destroy", at=NOW, instance_id="101"))

    result = run(capsys, "snooze", "vast-main/101", "--for", "1h", "--db", str(db))

    assert result.code == 0
    assert "a destroy by rule idle_gpu is already pending" in result.out


@pytest.mark.parametrize("duration", ["0s", "soon", "-1h"])
def test_a_duration_that_is_not_positive_is_a_usage_error(
    db: Path, duration: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "snooze", "vast-main/101", f"--for={duration}", "--db", str(db))

    assert exit_info.value.code == 2


# -- protect / unprotect ----------------------------------------------------------------------


def test_protecting_an_instance_records_it_once_with_an_audit_event(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(capsys, "protect", "vast-main/101", "--reason", "long run", "--db", str(db))
    again = run(capsys, "protect", "vast-main/101", "--db", str(db))

    assert (first.code, again.code) == (0, 0)
    assert first.out.startswith("protected instance vast-main/101 (job-101)")
    assert again.out.startswith("instance vast-main/101 (job-101) was protected already")
    [protection] = store.list_protections()
    assert (protection.kind, protection.value, protection.account) == (
        ProtectionKind.INSTANCE_ID,
        "101",
        ACCOUNT,
    )
    assert protection.reason == "long run"
    assert is_protected(store, ACCOUNT, "101")
    assert not is_protected(store, OTHER, "101")  # the same id in another account is not
    [event] = store.list_audit_events()
    assert (event.kind, event.instance_id, event.data["reason"]) == (
        "protection_added",
        "101",
        "long run",
    )


def test_protecting_names_by_glob_lists_the_instances_it_covers(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "protect", "--name", "*KEEP*", "--db", str(db))

    assert result.code == 0
    assert "recorded instances it covers: vast-main/102 (keep-me)" in result.out
    assert is_protected(store, ACCOUNT, "555", name="keep-this-too")
    assert store.list_protections() == [
        Protection(ProtectionKind.NAME_GLOB, "*KEEP*", None, "", NOW)
    ]


def test_protecting_an_account_requires_a_known_account(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = run(capsys, "protect", "--account", "runpod-x", "--db", str(db))
    known = run(capsys, "protect", "--account", OTHER, "--db", str(db))

    assert unknown.code == 2
    assert "unknown account 'runpod-x'" in unknown.err
    assert "known accounts: vast-main, vast-second" in unknown.err
    assert known.code == 0
    assert "vast-second/101 (job-101), vast-second/201 (job-201)" in known.out
    assert is_protected(store, OTHER, "999")


def test_protect_needs_exactly_one_target(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["protect", "--db", str(db)], ["protect", "101", "--name", "x", "--db", str(db)]):
        with pytest.raises(SystemExit) as exit_info:
            run(capsys, *argv)
        assert exit_info.value.code == 2


def test_unprotect_removes_the_protection_with_an_audit_event(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "protect", "vast-main/101", "--db", str(db)).code == 0

    result = run(capsys, "unprotect", "101", "--db", str(db))  # unique among protections

    assert result.code == 0
    assert result.out.startswith("removed the protection of instance vast-main/101")
    assert store.list_protections() == []
    assert not is_protected(store, ACCOUNT, "101")
    assert [event.kind for event in store.list_audit_events()] == [
        "protection_added",
        "protection_removed",
    ]


def test_unprotect_of_a_gone_instance_still_works(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "protect", "vast-main/102", "--db", str(db)).code == 0
    store.record_observation(observation(instance("101", at=NOW), at=NOW), NOW)  # 102 gone

    assert run(capsys, "unprotect", "vast-main/102", "--db", str(db)).code == 0
    assert store.list_protections() == []


def test_unprotect_of_something_not_protected_is_exit_1(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "unprotect", "--name", "*keep*", "--db", str(db))

    assert result.code == 1
    assert "names matching '*keep*' is not protected in the database" in result.out
    assert "with --db the configuration's protections are not visible" in result.out
    assert store.list_audit_events() == []


def test_unprotect_of_a_configured_protection_says_to_edit_the_configuration(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path,
        db,
        '[safety]\nprotect_ids = ["vast-main/101"]\nprotect_accounts = ["vast-second"]\n'
        + ACCOUNTS,
    )

    by_id = run(capsys, "unprotect", "vast-main/101", "--config", str(config))
    by_account = run(capsys, "unprotect", "--account", OTHER, "--config", str(config))

    assert by_id.code == 1
    assert "it is protected by the configuration ([safety] protect_ids)" in by_id.out
    assert "remove it there: the command line cannot" in by_id.out
    assert by_account.code == 1
    assert "[safety] protect_accounts" in by_account.out


def test_an_unprotected_instance_that_the_configuration_still_protects_is_pointed_out(
    store: Store, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, db, '[safety]\nprotect_ids = ["101"]\n')
    assert run(capsys, "protect", "vast-main/101", "--config", str(config)).code == 0

    result = run(capsys, "unprotect", "vast-main/101", "--config", str(config))

    assert result.code == 0
    assert "note: the configuration still protects it ([safety] protect_ids)" in result.out


def test_a_gone_instance_cannot_be_protected(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "protect", "vast-main/103", "--db", str(db))

    assert result.code == 2
    assert "is gone" in result.err
    assert store.list_protections() == []


def test_the_state_of_an_instance_does_not_matter_for_a_snooze_unless_gone(
    store: Store, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = instance("201", InstanceState.STOPPED, account=OTHER, at=NOW)
    store.record_observation(
        observation(instance("101", account=OTHER, at=NOW), stopped, account=OTHER, at=NOW), NOW
    )

    assert run(capsys, "snooze", "vast-second/201", "--for", "1h", "--db", str(db)).code == 0
