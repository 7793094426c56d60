"""The prober with a fake runner: which instances, what each result means, the bounded pool."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import (
    InstanceRef,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Verdict,
)
from watchdog_gpu.probe.command import BEGIN_MARKER, END_MARKER, CommandResult, ProbeCommandSpec
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober, provider_api_samples
from watchdog_gpu.probe.runner import AccountRunners, SshTarget

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
IDLE = (FIXTURES / "dmon_default_1gpu_idle_h100_590.48.01.txt").read_text()
BUSY = (FIXTURES / "dmon_default_1gpu_load_h100_590.48.01.txt").read_text()


def probe_output(
    dmon: str = IDLE,
    *,
    dmon_exit: int = 0,
    apps: str = "",
    tail: str = "1700000000\n",
    end: bool = True,
) -> str:
    text = (
        f"{BEGIN_MARKER}\n{dmon}===WATCHDOG-GPU:DMON-EXIT:{dmon_exit}===\n"
        f"{apps}===WATCHDOG-GPU:APPS-EXIT:0===\n===WATCHDOG-GPU:GPUS===\n{tail}"
    )
    return text + (f"{END_MARKER}\n" if end else "")


def ok(stdout: str) -> CommandResult:
    return CommandResult(stdout=stdout, stderr="", exit_status=0, timed_out=False)


IDLE_RESULT = ok(probe_output())
Behaviour = CommandResult | Exception | Callable[[SshTarget], CommandResult]


class FakeRunner:
    """Answers per instance id; records every call; keeps 'connections' like the real runner."""

    def __init__(
        self, answers: dict[str, Behaviour] | None = None, default: Behaviour = IDLE_RESULT
    ) -> None:
        self.answers = answers or {}
        self.default = default
        self.calls: list[tuple[SshTarget, str, float]] = []
        self.kept: set[InstanceRef] = set()
        self.closed: list[InstanceRef] = []
        self._lock = threading.Lock()

    def run(self, target: SshTarget, command: str, deadline_seconds: float) -> CommandResult:
        with self._lock:
            self.calls.append((target, command, deadline_seconds))
            self.kept.add(target.ref)
        answer = self.answers.get(target.instance_id, self.default)
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(target)
        return answer

    def close_except(self, keep: Collection[InstanceRef]) -> None:
        for ref in [ref for ref in self.kept if ref not in keep]:
            self.close_instance(ref)

    def close_instance(self, ref: InstanceRef) -> None:
        self.kept.discard(ref)
        self.closed.append(ref)


def instance(
    instance_id: str = "i-1",
    *,
    state: InstanceState = InstanceState.RUNNING,
    name: str = "train",
    host: str | None = "203.0.113.7",
    port: int | None = 22,
    **extra: object,
) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="acct",
        instance_id=instance_id,
        name=name,
        state=state,
        raw_state=state.value,
        observed_at=NOW,
        ssh_host=host,
        ssh_port=port,
        **extra,  # type: ignore[arg-type]
    )


def make_prober(runner: object, **options: object) -> Prober:
    return Prober(runner, clock=VirtualClock(NOW), **options)  # type: ignore[arg-type]


def one(prober: Prober, snapshot: InstanceSnapshot) -> ProbeOutcome:
    (outcome,) = prober.probe_all([snapshot], NOW)
    return outcome


def assert_failed_without_samples(outcome: ProbeOutcome, status: ProbeStatus) -> None:
    assert outcome.status is status
    assert not any(sample.verdict is Verdict.IDLE for sample in outcome.samples)
    assert outcome.samples == ()


def test_only_running_instances_with_an_ssh_endpoint_are_probed() -> None:
    runner = FakeRunner()
    instances = [
        instance("run"),
        instance("stopped", state=InstanceState.STOPPED),
        instance("starting", state=InstanceState.STARTING),
        instance("unknown", state=InstanceState.UNKNOWN),
        instance("no-host", host=None),
        instance("no-port", port=None),
    ]

    outcomes = make_prober(runner).probe_all(instances, NOW)

    assert [outcome.instance_id for outcome in outcomes] == ["run"]
    assert [target.instance_id for target, _, _ in runner.calls] == ["run"]


def test_an_instance_listed_twice_is_probed_once() -> None:
    runner = FakeRunner()

    outcomes = make_prober(runner).probe_all([instance(), instance()], NOW)

    assert len(outcomes) == 1
    assert len(runner.calls) == 1


def test_idle_output_yields_idle_samples_stamped_from_the_probe_time() -> None:
    clock = VirtualClock(NOW)

    def sampling_takes_time(target: SshTarget) -> CommandResult:
        clock.advance(timedelta(seconds=5))
        return ok(probe_output())

    prober = Prober(FakeRunner(default=sampling_takes_time), clock=clock)
    (outcome,) = prober.probe_all([instance()], NOW)

    assert outcome.status is ProbeStatus.OK
    assert outcome.at == NOW
    assert outcome.duration_seconds == 5
    assert [sample.verdict for sample in outcome.samples] == [Verdict.IDLE] * 5
    assert [sample.at for sample in outcome.samples] == [
        NOW + timedelta(seconds=second) for second in (1, 2, 3, 4, 5)
    ]


def test_busy_output_yields_busy_samples() -> None:
    outcome = one(make_prober(FakeRunner(default=ok(probe_output(BUSY)))), instance())

    assert {sample.verdict for sample in outcome.samples} == {Verdict.BUSY}


def test_the_threshold_decides_between_idle_and_busy() -> None:
    dmon = "# gpu     sm    mem\n# Idx      %      %\n    0      4      0\n"
    runner = FakeRunner(default=ok(probe_output(dmon)))

    low = one(make_prober(runner, threshold_percent=3), instance())
    high = one(make_prober(runner, threshold_percent=5), instance())

    assert [sample.verdict for sample in low.samples] == [Verdict.BUSY]
    assert [sample.verdict for sample in high.samples] == [Verdict.IDLE]


@pytest.mark.parametrize(
    "status",
    [
        ProbeStatus.UNREACHABLE,
        ProbeStatus.AUTH_FAILED,
        ProbeStatus.HOST_KEY_CHANGED,
        ProbeStatus.TIMEOUT,
    ],
)
def test_a_runner_failure_becomes_its_outcome(status: ProbeStatus) -> None:
    runner = FakeRunner(default=ProbeError("it failed", status=status.value))

    outcome = one(make_prober(runner), instance())

    assert_failed_without_samples(outcome, status)
    assert outcome.detail == "it failed"


def test_a_runner_cannot_claim_success_through_an_exception() -> None:
    runner = FakeRunner(default=ProbeError("odd", status="ok"))

    assert_failed_without_samples(one(make_prober(runner), instance()), ProbeStatus.UNREACHABLE)


@pytest.mark.parametrize(
    ("result", "status"),
    [
        (CommandResult(probe_output(), "", None, timed_out=True), ProbeStatus.TIMEOUT),
        (ok(probe_output(dmon=IDLE, dmon_exit=124)), ProbeStatus.TIMEOUT),
        (CommandResult(probe_output()[:80], "", None, timed_out=False), ProbeStatus.UNREACHABLE),
        (CommandResult("", "", None, timed_out=False), ProbeStatus.UNREACHABLE),
        (
            CommandResult(probe_output(), "", 0, timed_out=False, output_truncated=True),
            ProbeStatus.UNPARSEABLE,
        ),
        (CommandResult("", "sh: not found\n", 127, timed_out=False), ProbeStatus.UNPARSEABLE),
        (ok(probe_output(dmon="lorem ipsum\n")), ProbeStatus.UNPARSEABLE),
        (ok(probe_output(dmon="")), ProbeStatus.UNPARSEABLE),
        (ok(probe_output(dmon="# gpu sm\n# Idx %\n")), ProbeStatus.UNPARSEABLE),
        (
            ok(probe_output(dmon="sh: 1: nvidia-smi: not found\n", dmon_exit=127)),
            ProbeStatus.DRIVER_ERROR,
        ),
        (ok(probe_output(dmon="No devices were found\n", dmon_exit=6)), ProbeStatus.DRIVER_ERROR),
        (ok(probe_output(dmon=IDLE, dmon_exit=15)), ProbeStatus.DRIVER_ERROR),
    ],
    ids=[
        "local-deadline",
        "remote-timeout",
        "cut-mid-dmon",
        "no-output-no-status",
        "too-much-output",
        "no-begin-marker",
        "garbage",
        "empty-dmon",
        "header-without-rows",
        "no-nvidia-smi",
        "no-devices",
        "rows-but-error-exit",
    ],
)
def test_every_broken_output_is_a_failure_without_samples(
    result: CommandResult, status: ProbeStatus
) -> None:
    outcome = one(make_prober(FakeRunner(default=result)), instance())

    assert_failed_without_samples(outcome, status)


def test_a_driver_error_names_its_kind() -> None:
    dmon = (FIXTURES / "err_driver_not_loaded.txt").read_text()
    runner = FakeRunner(default=ok(probe_output(dmon=dmon, dmon_exit=9)))

    outcome = one(make_prober(runner), instance())

    assert outcome.detail.startswith("driver_not_loaded:")


def test_a_session_cut_after_dmon_keeps_the_real_samples_but_not_the_login_answer() -> None:
    cut = CommandResult(probe_output(end=False), "", None, timed_out=False)

    outcome = one(make_prober(FakeRunner(default=cut)), instance())

    assert outcome.status is ProbeStatus.OK
    assert len(outcome.samples) == 5
    assert outcome.interactive_login is None


def test_recent_terminal_input_marks_an_interactive_login() -> None:
    typed = ok(probe_output(tail="1700000000\n1699999950\n"))

    outcome = one(make_prober(FakeRunner(default=typed)), instance())

    assert outcome.interactive_login is True


def test_an_unexpected_error_costs_one_outcome_not_the_round() -> None:
    runner = FakeRunner({"bug": RuntimeError("boom")})
    instances = [instance("a"), instance("bug"), instance("b")]

    outcomes = make_prober(runner).probe_all(instances, NOW)

    statuses = {outcome.instance_id: outcome.status for outcome in outcomes}
    assert statuses == {"a": ProbeStatus.OK, "bug": ProbeStatus.UNREACHABLE, "b": ProbeStatus.OK}
    assert "RuntimeError" in outcomes[1].detail


def test_a_hostile_instance_name_never_reaches_the_command() -> None:
    runner = FakeRunner()
    prober = make_prober(runner)
    hostile = replace(
        instance("x; reboot"),
        name="$(rm -rf /); reboot `id` 'quoted' \"dq\" && echo pwned",
        labels={"label": "; shutdown -h now", "$(curl evil)": "|sh"},
        gpu_name="H100$(id)",
    )

    prober.probe_all([instance()], NOW)
    prober.probe_all([hostile], NOW)

    normal_command, hostile_command = (command for _, command, _ in runner.calls)
    assert hostile_command == normal_command == prober.command
    assert hostile_command.encode() == normal_command.encode()


def test_the_pool_runs_at_most_workers_probes_at_once() -> None:
    workers = 3
    barrier = threading.Barrier(workers, timeout=10)
    active = 0
    peak = 0
    lock = threading.Lock()

    def concurrent(target: SshTarget) -> CommandResult:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        barrier.wait()  # only passes when `workers` probes run at the same time
        with lock:
            active -= 1
        return ok(probe_output())

    instances = [instance(f"i-{number}") for number in range(3 * workers)]
    outcomes = make_prober(FakeRunner(default=concurrent), workers=workers).probe_all(
        instances, NOW
    )

    assert [outcome.status for outcome in outcomes] == [ProbeStatus.OK] * len(instances)
    assert peak == workers


def test_connections_of_instances_that_left_are_closed_and_gone_ones_forgotten() -> None:
    runner = FakeRunner()
    store = MemoryHostKeyStore()
    store.pin_host_key("acct", "gone", "ssh-ed25519", "AAAA", NOW)
    store.pin_host_key("acct", "stopped", "ssh-ed25519", "BBBB", NOW)
    prober = make_prober(runner, host_key_store=store)
    prober.probe_all([instance("stays"), instance("stopped"), instance("gone")], NOW)

    prober.probe_all(
        [
            instance("stays"),
            instance("stopped", state=InstanceState.STOPPED),
            instance("gone", state=InstanceState.GONE),
        ],
        NOW,
    )

    assert runner.kept == {InstanceRef("acct", "stays")}
    assert store.get_pinned_host_key("acct", "gone") is None
    # A stopped instance keeps its pin: it comes back as the same machine.
    assert store.get_pinned_host_key("acct", "stopped") == ("ssh-ed25519", "BBBB")


def test_the_login_user_comes_from_the_provider_then_the_account() -> None:
    runner = FakeRunner()
    prober = make_prober(runner, default_user={"acct": "ubuntu"})

    prober.probe_all([instance("a"), instance("b", ssh_user="admin")], NOW)

    assert {target.instance_id: target.user for target, _, _ in runner.calls} == {
        "a": "ubuntu",
        "b": "admin",
    }


def test_each_account_uses_its_own_runner_and_an_unknown_account_fails_auth() -> None:
    first, second = FakeRunner(), FakeRunner()
    runners = AccountRunners({"acct": first, "other": second})
    other = replace(instance("o"), account="other")
    stranger = replace(instance("s"), account="nobody")

    outcomes = make_prober(runners).probe_all([instance("a"), other, stranger], NOW)

    assert [target.instance_id for target, _, _ in first.calls] == ["a"]
    assert [target.instance_id for target, _, _ in second.calls] == ["o"]
    assert outcomes[2].status is ProbeStatus.AUTH_FAILED


def test_provider_utilisation_becomes_a_second_signal() -> None:
    pod = replace(instance("pod"), provider="runpod", provider_gpu_util_percent=(87.0, 0.0, None))
    stopped = replace(pod, instance_id="stopped-pod", state=InstanceState.STOPPED)

    samples = provider_api_samples([pod, stopped, instance("no-api")], threshold_percent=5)

    assert [(sample.gpu_index, sample.verdict) for sample in samples] == [
        (0, Verdict.BUSY),
        (1, Verdict.IDLE),
        (2, Verdict.UNKNOWN),
    ]
    assert {sample.source for sample in samples} == {SampleSource.PROVIDER_API}
    assert {sample.at for sample in samples} == {NOW}


def test_a_prober_refuses_a_pool_without_workers() -> None:
    with pytest.raises(ValueError, match="workers"):
        make_prober(FakeRunner(), workers=0)


def test_the_deadline_given_to_the_runner_covers_the_remote_timeouts() -> None:
    runner = FakeRunner()
    spec = ProbeCommandSpec(samples=20, interval_seconds=2)

    make_prober(runner, spec=spec).probe_all([instance()], NOW)

    ((_, _, deadline),) = runner.calls
    assert deadline == spec.deadline_seconds
    assert deadline > spec.dmon_timeout_seconds + 2 * spec.query_timeout_seconds


def test_an_instance_whose_destroy_went_out_during_the_round_gets_no_outcome_and_no_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The act job runs in its own thread: the host of an instance destroyed while the round
    # probed it vanishes mid-round. The round asks who is leaving once its probes are done.
    runner = FakeRunner(
        answers={"dying": ProbeError("timed out", status=ProbeStatus.UNREACHABLE.value)}
    )
    asked: list[int] = []

    def leaving() -> set[InstanceRef]:
        asked.append(len(runner.calls))
        return {InstanceRef("acct", "dying")}

    with caplog.at_level(logging.INFO, logger="watchdog_gpu.probe.prober"):
        outcomes = make_prober(runner).probe_all(
            [instance("dying"), instance("alive")], NOW, leaving
        )

    assert asked == [2]  # after both hosts were probed
    assert [outcome.instance_id for outcome in outcomes] == ["alive"]
    assert "dying" not in caplog.text
