"""Scenario: a destroy refused for 10 minutes because the account's API key is refused
(destroy_key_refused.toml).

A refused key can be fixed: the destroy is not given up while the idle instance bills. It waits
for the account to be read again and is then made; its message says exactly that, never "final".
"""

from __future__ import annotations

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    finish,
    offset,
    simulating,
)

NAME = "destroy_key_refused"
INSTANCE = "vast-main/9101"
REVOKED_AT = offset("40m")
KEY_WORKS_AT = offset("50m")


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[tuple[int, str]]]:
    """The run, and when (offset) and how (the error) a provider call for 9101 was refused for
    its key: the destroy call itself, or a listing of the account while the call waited."""
    with simulating(NAME, tmp_path_factory.mktemp(NAME)) as sim:
        run = finish(sim)
        refused = [
            (round((event.at - sim.scenario.start).total_seconds()), event.message)
            for event in sim.store.list_audit_events()
            if event.kind == "provider_error"
            and event.instance_id == "9101"
            and "auth" in event.message
        ]
        return run, refused


def test_the_destroy_is_refused_for_the_key_while_it_is_revoked(
    outcome: tuple[Run, list[tuple[int, str]]],
) -> None:
    # The precondition: the destroy call itself met the refused key, in the pass that planned it
    # (each phase runs at the instant it starts: the call after the key was refused, although
    # 9101 was listed before), and it kept waiting on it until the key worked again.
    run, refused = outcome
    assert refused, "no provider call for 9101 was refused"
    (planned,) = run.actions_for(INSTANCE)
    (first_at, first_error), *_waits = refused
    assert "DELETE" in first_error  # the destroy call, not a listing
    assert REVOKED_AT <= first_at == planned["offset_s"]
    assert max(at for at, _error in refused) < KEY_WORKS_AT
    assert len(refused) > 3  # more than the three attempts that used to be final


def test_the_destroy_goes_through_once_the_key_works_again(
    outcome: tuple[Run, list[tuple[int, str]]],
) -> None:
    run, _refused = outcome
    ((at, account, instance, action),) = run.api_calls  # refused calls change nothing
    assert (account, instance, action) == ("vast-main", "9101", "destroy")
    # Called again as soon as the account reads: within the listing backoff (2 min) and a tick.
    assert KEY_WORKS_AT <= at <= KEY_WORKS_AT + offset("3m")
    (recorded,) = run.actions_for(INSTANCE)
    assert recorded["result"] == "verified"
    assert run.instances[INSTANCE]["final_state"] == "gone"
    assert_spend_never_above_baseline(run)


def test_the_messages_say_it_is_retried_never_that_it_is_final(
    outcome: tuple[Run, list[tuple[int, str]]],
) -> None:
    run, _refused = outcome
    notes = [note for _at, note in run.sent if note.instance_id == "9101"]
    (refused,) = [note for note in notes if note.idempotency_key.endswith(":refused")]
    assert "API key refused" in refused.title
    assert "as soon as the account can be read again" in refused.body
    assert "not given up" in refused.body
    assert all("final" not in note.body for note in notes)
    assert all("Gave up" not in note.title for note in notes)
    assert notes[-1].title.startswith("Destroyed vast-main/9101")
