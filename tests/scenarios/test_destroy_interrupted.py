"""Scenario: a destroy answered HTTP 500 whose retry is interrupted by a restart
(destroy_interrupted.toml).

The process is stopped in the retry loop of the provider call — after the call was marked and
answered 500 once, before the retried request reached the provider — and a new one takes over the
same database, world and clock (as a daemon restart, or a new leader, would). The call may have
reached the provider, so the new process verifies first; the listing shows the instance still
billing, so the destroy is called again at once, not after ``escalate_unverified_after`` while it
bills.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pytest

from tests.scenarios.helpers import (
    Run,
    assert_spend_never_above_baseline,
    finish,
    offset,
    simulating,
)
from watchdog_gpu.sim.http import SimRequest, SimResponse
from watchdog_gpu.sim.simulate import Simulation

NAME = "destroy_interrupted"
INSTANCE = "vast-main/9201"
DELETE_PATH = "/api/v0/instances/9201"


class Killed(BaseException):
    """The process dies: nothing in the watchdog may catch it (as with SIGKILL)."""


@dataclass
class KillOnSecondDestroy:
    """Wraps the Vast dialect: the second destroy request of 9201 (the retry) kills the process
    before it reaches the provider; ``answers`` are the HTTP statuses of the ones before."""

    sim: Simulation
    seen: int = 0
    killed_at: datetime | None = None
    answers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        dialect = self.sim.dialects["vast"]
        self.handle = dialect.handle
        dialect.handle = self  # type: ignore[method-assign]

    def __call__(self, request: SimRequest) -> SimResponse:
        if request.method != "DELETE" or request.path.rstrip("/") != DELETE_PATH:
            return self.handle(request)
        self.seen += 1
        if self.seen == 2:
            self.killed_at = self.sim.clock.now()
            raise Killed
        response = self.handle(request)
        self.answers.append(response.status)
        return response

    def remove(self) -> None:
        self.sim.dialects["vast"].handle = self.handle  # type: ignore[method-assign]


@dataclass(frozen=True)
class Outcome:
    run: Run
    killed_at: int  # offset of the kill
    kinds: list[str]  # audit kinds of 9201's action, in order
    answers: list[int]  # HTTP statuses of 9201's destroy requests before the kill


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    with simulating(NAME, tmp_path_factory.mktemp(NAME)) as sim:
        killer = KillOnSecondDestroy(sim)
        with pytest.raises(Killed):
            sim.run()  # until the process is killed
        killer.remove()
        assert killer.killed_at is not None
        sim.restart()
        run = finish(sim)
        kinds = [
            event.kind for event in sim.store.list_audit_events() if event.instance_id == "9201"
        ]
        return Outcome(run, sim.offset(killer.killed_at), kinds, killer.answers)


def test_the_retry_of_a_destroy_answered_500_is_interrupted(outcome: Outcome) -> None:
    # The precondition: the call was answered 500, its retry cut off by the restart.
    assert outcome.answers == [500]
    assert outcome.kinds[:3] == ["warning", "action_planned", "provider_call_interrupted"]
    # Killed while the API still answers 500 (40m to 42m): the HTTP client's retry of the call,
    # made after the listing at the call (itself retried on the 500s for its budget) failed.
    assert offset("40m") <= outcome.killed_at < offset("42m")


def test_the_new_process_verifies_then_calls_again_at_once(outcome: Outcome) -> None:
    run = outcome.run
    assert outcome.kinds[2:4] == ["provider_call_interrupted", "provider_called"]
    ((at, _account, _instance, action),) = run.api_calls  # the one call that reached Vast
    assert action == "destroy"
    assert outcome.killed_at < at <= outcome.killed_at + offset("2m")  # not 10 minutes on
    (recorded,) = run.actions_for(INSTANCE)
    assert recorded["result"] == "verified"
    assert run.instances[INSTANCE]["final_state"] == "gone"
    assert_spend_never_above_baseline(run)
    # Nothing escalated: it stopped billing long before escalate_unverified_after.
    assert not [n for n in run.notifications if "still billing" in n["title"]]
