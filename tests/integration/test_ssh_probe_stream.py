"""The streaming probe against a real sshd on 127.0.0.1 with a paced fake ``nvidia-smi dmon``.

Each failure has its verdict — rows stop and the gap is blind (never idle), the host is
reconnected with backoff — and leaves no process of the probe on the "rented" machine: the
remote command dies with its channel (stdin EOF → ``kill 0``), whether the watchdog closes it,
the connection drops, or the watchdog process is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import FakeGpu, serving_sshd
from tests.integration.probe_helpers import NOW, instance_on, make_runner
from tests.integration.sshd import SshServer
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.model import ProbeStatus, Verdict
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.stream_buffer import ProbeMode, StreamState
from watchdog_gpu.probe.stream_command import StreamCommandSpec
from watchdog_gpu.probe.streams import StreamManager, StreamSettings
from watchdog_gpu.rules.idle_clock import gpu_observed_spans

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HEADER = (
    "# gpu     sm    mem    enc    dec    jpg    ofa \n"
    "# Idx      %      %      %      %      %      % \n"
)
TWO_IDLE_GPUS = HEADER + "".join(
    f"{gpu:>5}" + "".join(f"{0:>7}" for _ in range(6)) + " \n" for gpu in (0, 1)
)
SETTINGS = StreamSettings(
    stall_after=timedelta(seconds=3),
    max_backoff=timedelta(seconds=2),
    command=StreamCommandSpec(aux_interval_seconds=5, query_timeout_seconds=5, batch_seconds=2),
)
BATCH = SETTINGS.command.batch_seconds  # a healthy host's rows come this many seconds at a time
CLOCK = SystemClock()


def wait_for(check: Callable[[], bool], seconds: float = 15.0) -> bool:
    end = CLOCK.monotonic() + seconds
    while CLOCK.monotonic() < end:
        if check():
            return True
        CLOCK.sleep(0.05)
    return False


def stream_live(fake: FakeGpu, *, stall_after_passes: int = 0) -> None:
    """dmon prints a row per GPU per second until killed (or stalls after some passes)."""
    fake.replay("dmon", text=TWO_IDLE_GPUS, pace_seconds=0.5, forever=stall_after_passes)


def remote_processes(server: SshServer) -> dict[int, int]:
    """pid → process group of every process started by a login to ``server`` (its sessions'
    environment names the server's fake-GPU directory), wherever it was reparented to."""
    marker = f"WATCHDOG_FAKE_GPU_STATE={server.state_dir}".encode()
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = os.getpgid(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return found


def target_of(server: SshServer) -> SshTarget:
    return SshTarget("acct", "i-1", "127.0.0.1", server.port, "root")


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """This module's own sshd (it overrides the session's): the tests count every process a
    login to the server left behind, so another module's leftovers on the shared server (a
    hanging fake nvidia-smi, an end-to-end stream) must not be counted."""
    workdir = tmp_path_factory.mktemp("sshd-stream")
    workdir.chmod(0o700)
    yield from serving_sshd(workdir)


@pytest.fixture
def runner(ssh_server: SshServer) -> Iterator[ParamikoRunner]:
    with make_runner(ssh_server, MemoryHostKeyStore()) as runner:
        yield runner


def manager_for(runner: ParamikoRunner, settings: StreamSettings = SETTINGS) -> StreamManager:
    return StreamManager(runner, clock=CLOCK, settings=settings)


def start_streaming(manager: StreamManager, target: SshTarget) -> None:
    """Ask ``manager`` for ``target``'s stream and wait until its rows arrive."""
    manager.sync([target])
    assert wait_for(lambda: manager.health()[target.ref].state is StreamState.STREAMING)


def test_a_healthy_stream_is_read_every_second_and_nothing_is_left_behind(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    stream_live(fake_gpu)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        start_streaming(manager, target)
        manager.take(target.ref)
        CLOCK.sleep(5)
        read = manager.take(target.ref)
        taken_at = CLOCK.now().timestamp()
        assert read is not None
        assert sorted(read.runs) == [0, 1]
        assert all(sum(run.rows for run in runs) >= 3 for runs in read.runs.values())
        # The host sends its rows in batches, each row at its own second (not at the instant
        # its batch was read), none after the take.
        for runs in read.runs.values():
            (run,) = runs
            assert run.last <= taken_at
            assert run.last - run.first >= run.rows - 2
        outcome = Prober(runner, clock=CLOCK).stream_outcome(instance_on(ssh_server), read, NOW)
        assert outcome.status is ProbeStatus.OK
        assert outcome.mode == "stream"
        # One continuous idle run per GPU: every second between its first and last row observed.
        assert sorted(s.gpu_index for s in outcome.samples) == [0, 1]
        assert all(s.verdict is Verdict.IDLE and s.covers_from for s in outcome.samples)
        assert manager.threads() <= 1 + SETTINGS.connectors
        assert len(set(remote_processes(ssh_server).values())) == 1  # one session
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def test_a_stalled_stream_is_blind_then_reconnected_without_an_orphan(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    stream_live(fake_gpu, stall_after_passes=2)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        manager.sync([target])
        assert wait_for(lambda: fake_gpu.is_hanging("dmon"))
        assert wait_for(
            lambda: manager.health()[target.ref].status is ProbeStatus.TIMEOUT, seconds=10
        )
        read = manager.take(target.ref)
        assert read is not None
        assert read.row_count <= 2 * 2 + 2  # two passes of two GPUs, nothing invented since
        # The next round finds nothing new: a timed-out probe without samples (blind).
        empty = manager.take(target.ref)
        assert empty is not None
        assert empty.row_count == 0
        blind = Prober(runner, clock=CLOCK).stream_outcome(
            instance_on(ssh_server), empty, CLOCK.now()
        )
        assert blind.status is ProbeStatus.TIMEOUT
        assert blind.samples == ()
        # It reconnects (a second dmon starts) and the stalled session's processes are gone.
        assert wait_for(lambda: len([c for c in fake_gpu_calls(fake_gpu) if "dmon" in c]) >= 2)
        CLOCK.sleep(1)
        assert len(set(remote_processes(ssh_server).values())) <= 1
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def test_a_dmon_slow_to_print_its_first_row_is_not_a_stall(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    # The aux block and dmon's header come at once; the first row 5 s later (dmon initialising
    # on a loaded host), longer than this manager's stall_after of 3 s.
    stream_live(fake_gpu)
    (fake_gpu.state_dir / "dmon.delay").write_text("5\n")
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        manager.sync([target])
        assert wait_for(
            lambda: manager.health()[target.ref].state is StreamState.STREAMING, seconds=20
        )
        assert manager.health()[target.ref].attempts == 0
        CLOCK.sleep(BATCH + 2)  # the first row came alone: one batch
        assert len([call for call in fake_gpu.calls() if call.startswith("dmon")]) == 1
        read = manager.take(target.ref)
        assert read is not None
        assert sorted(read.runs) == [0, 1]
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def test_a_host_silent_between_two_batches_is_not_stalled(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    # The host sends its rows every 4 s, longer than this manager's stall_after of 2 s.
    stream_live(fake_gpu)
    settings = replace(
        SETTINGS,
        stall_after=timedelta(seconds=2),
        command=replace(SETTINGS.command, batch_seconds=4),
    )
    target = target_of(ssh_server)
    with manager_for(runner, settings) as manager:
        start_streaming(manager, target)
        states = set()
        end = CLOCK.monotonic() + 10
        while CLOCK.monotonic() < end:
            states.add(manager.health()[target.ref].state)
            CLOCK.sleep(0.1)
        assert states == {StreamState.STREAMING}
        assert len([call for call in fake_gpu.calls() if call.startswith("dmon")]) == 1
        read = manager.take(target.ref)
        assert read is not None
        assert read.row_count >= 2 * 6  # at least two batches of both GPUs arrived
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def fake_gpu_calls(fake: FakeGpu) -> list[str]:
    log = fake.state_dir / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def assert_a_blind_hole(manager: StreamManager, runner: ParamikoRunner, server: SshServer) -> None:
    """GPU 0's rows taken now are two runs (two sessions) with more than 2 s between them: the
    rows never received are blind time, not idle."""
    read = manager.take(target_of(server).ref)
    assert read is not None
    outcome = Prober(runner, clock=CLOCK).stream_outcome(instance_on(server), read, NOW)
    runs = sorted((s.covers_from, s.at) for s in outcome.samples if s.gpu_index == 0)
    assert len(runs) >= 2
    assert runs[1][0] is not None
    assert (runs[1][0] - runs[0][1]).total_seconds() > 2


def test_a_dropped_connection_is_blind_time_and_the_host_is_reconnected(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    stream_live(fake_gpu)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        start_streaming(manager, target)
        first_session = set(remote_processes(ssh_server).values())
        # The next session's first row comes 4 s after it starts: a hole longer than the
        # tolerance of a row's jitter however fast the reconnection is.
        (fake_gpu.state_dir / "dmon.delay").write_text("4\n")
        assert ssh_server.kill_sessions(only_sshd=True) > 0
        assert wait_for(
            lambda: manager.health()[target.ref].status is ProbeStatus.UNREACHABLE, seconds=10
        )
        # The remote side noticed (stdin EOF) and killed the first session's processes.
        assert wait_for(lambda: not first_session & set(remote_processes(ssh_server).values()))
        assert wait_for(
            lambda: manager.health()[target.ref].state is StreamState.STREAMING, seconds=20
        )
        CLOCK.sleep(2)
        # The drop left a hole between two runs: blind, not idle.
        assert_a_blind_hole(manager, runner, ssh_server)
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def batching_loops(server: SshServer) -> list[int]:
    """The pids of the ``sh`` loops that read dmon's rows (``stream_command.batch_loop``): the
    ``sh`` processes of ``server``'s sessions whose stdin is the pipe a fake dmon writes to."""
    processes = remote_processes(server)

    def link(pid: int, fd: int) -> str:
        try:
            return os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return ""

    def cmdline(pid: int) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    dmon_pipes = {link(pid, 1) for pid in processes if b"\0dmon\0" in cmdline(pid)}
    dmon_pipes.discard("")
    return [
        pid
        for pid in processes
        if link(pid, 0) in dmon_pipes
        and Path(f"/proc/{pid}/exe").resolve().name in {"sh", "dash", "bash"}
    ]


def test_a_dead_batching_loop_ends_the_session_and_the_gap_is_blind(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    # The host's sh loop that batches dmon's rows is killed (OOM killer, an admin's pkill)
    # while dmon runs: dmon's next write gets SIGPIPE, the session's shell kills its group, the
    # channel closes; the watchdog reconnects, and the rows it never got are blind time.
    stream_live(fake_gpu)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        start_streaming(manager, target)
        first_session = set(remote_processes(ssh_server).values())
        loops = batching_loops(ssh_server)
        assert len(loops) == 1, loops
        (fake_gpu.state_dir / "dmon.delay").write_text("4\n")  # the next session starts late
        os.kill(loops[0], signal.SIGKILL)
        # Nothing of the first session stays on the host, and a second dmon streams.
        assert wait_for(lambda: not first_session & set(remote_processes(ssh_server).values()))
        assert wait_for(lambda: len([c for c in fake_gpu_calls(fake_gpu) if "dmon" in c]) >= 2)
        assert wait_for(
            lambda: manager.health()[target.ref].state is StreamState.STREAMING, seconds=20
        )
        CLOCK.sleep(BATCH + 2)
        assert_a_blind_hole(manager, runner, ssh_server)
    assert wait_for(lambda: not remote_processes(ssh_server)), remote_processes(ssh_server)


def test_a_changed_host_key_stops_the_stream_and_says_so(own_server: SshServer) -> None:
    fake = FakeGpu(own_server.state_dir)
    stream_live(fake)
    target = target_of(own_server)
    with make_runner(own_server, MemoryHostKeyStore()) as runner, manager_for(runner) as manager:
        manager.sync([target])
        assert wait_for(lambda: manager.health()[target.ref].state is StreamState.STREAMING)
        own_server.restart(new_host_key=True)
        assert wait_for(
            lambda: manager.health()[target.ref].status is ProbeStatus.HOST_KEY_CHANGED,
            seconds=20,
        )
        manager.take(target.ref)
        CLOCK.sleep(2)
        read = manager.take(target.ref)
        assert read is not None
        assert read.row_count == 0
        outcome = Prober(runner, clock=CLOCK).stream_outcome(instance_on(own_server), read, NOW)
        assert outcome.status is ProbeStatus.HOST_KEY_CHANGED
        assert outcome.samples == ()
        assert not remote_processes(own_server)  # no command ran on the impostor


def test_a_dmon_that_exits_ends_the_session_with_its_status(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    fake_gpu.replay("dmon", text=TWO_IDLE_GPUS * 2, pace_seconds=0.5, exit_status=3)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        manager.sync([target])
        assert wait_for(
            lambda: "exited with status 3" in manager.health()[target.ref].detail, seconds=15
        )
        health = manager.health()[target.ref]
        assert health.state is StreamState.BACKOFF
        assert health.status is ProbeStatus.UNREACHABLE
        read = manager.take(target.ref)
        assert read is not None
        assert read.row_count >= 2  # what it printed before exiting is kept
        assert wait_for(lambda: not remote_processes(ssh_server))


def test_a_host_that_does_not_keep_a_stream_falls_back_to_burst_mode(
    ssh_server: SshServer, fake_gpu: FakeGpu, runner: ParamikoRunner
) -> None:
    # dmon exits at once without a row, every time: no long-running command on this host.
    fake_gpu.replay("dmon", text="", exit_status=1)
    target = target_of(ssh_server)
    with manager_for(runner) as manager:
        manager.sync([target])
        assert wait_for(lambda: manager.health()[target.ref].mode is ProbeMode.BURST, seconds=30)
        assert manager.take(target.ref) is None  # the prober runs the burst command instead
        assert "without a row" in manager.health()[target.ref].detail


def test_rows_buffered_at_a_restart_die_with_the_process_and_the_gap_is_blind(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    """The rows read after the last tick live only in the daemon's memory: a restart (the
    process ends without another take) loses them, and the new process's first rows start after
    its streams are back. Between the last recorded row and the next one the idle clock sees
    nothing: blind time, never idle."""
    stream_live(fake_gpu)
    target = target_of(ssh_server)
    instance = instance_on(ssh_server, gpu_count=2)
    with make_runner(ssh_server, MemoryHostKeyStore()) as runner, manager_for(runner) as before:
        before.sync([target])
        assert wait_for(lambda: before.health()[target.ref].state is StreamState.STREAMING)
        # The first row comes alone, the next ones a batch later: wait for a batch.
        CLOCK.sleep(BATCH + 2)
        last_tick = before.take(target.ref)
        taken_at = CLOCK.now()
        assert last_tick is not None
        recorded = Prober(runner, clock=CLOCK).stream_outcome(instance, last_tick, NOW).samples
        CLOCK.sleep(BATCH + 2)  # rows arrive and wait for the next tick, which never comes
        buffered = before.take(target.ref)  # (only to show they were there; never recorded)
        stopped_at = CLOCK.now()
    assert buffered is not None
    assert buffered.row_count >= 4
    with make_runner(ssh_server, MemoryHostKeyStore()) as runner, manager_for(runner) as after:
        after.sync([target])
        assert wait_for(lambda: after.health()[target.ref].state is StreamState.STREAMING)
        CLOCK.sleep(BATCH + 2)
        first_tick = after.take(target.ref)
        assert first_tick is not None
        resumed = Prober(runner, clock=CLOCK).stream_outcome(instance, first_tick, NOW).samples
    assert recorded
    assert resumed
    assert all(s.verdict is Verdict.IDLE for s in (*recorded, *resumed))
    assert min(s.covers_from or s.at for s in resumed) > stopped_at
    for gpu in (0, 1):
        own = [s for s in (*recorded, *resumed) if s.gpu_index == gpu]
        start, end = min(s.covers_from or s.at for s in own), max(s.at for s in own)
        spans = gpu_observed_spans(own, start, end, timedelta(minutes=2))
        # Observed before the last tick and after the restart, blind between: the buffered
        # seconds after the last tick count as never seen. (A side may hold more than one span:
        # a fake host starved of CPU prints late, and its own gap is blind too.)
        observed_before = [span for span in spans if span[1] <= taken_at]
        observed_after = [span for span in spans if span[0] > stopped_at]
        assert observed_before, spans
        assert observed_after, spans
        assert len(observed_before) + len(observed_after) == len(spans), spans


CHILD = """
import sys, time
from pathlib import Path
from datetime import timedelta
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.probe.hostkeys import MemoryHostKeyStore
from watchdog_gpu.probe.runner import SshTarget
from watchdog_gpu.probe.ssh import ParamikoRunner
from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys
from watchdog_gpu.probe.stream_buffer import StreamState
from watchdog_gpu.probe.streams import StreamManager

port, key = int(sys.argv[1]), Path(sys.argv[2])
keys = load_private_keys(SshCredentials(private_key_path=key))
runner = ParamikoRunner(keys, MemoryHostKeyStore())
manager = StreamManager(runner, clock=SystemClock())
target = SshTarget("acct", "i-1", "127.0.0.1", port, "root")
manager.sync([target])
while manager.health()[target.ref].state is not StreamState.STREAMING:
    time.sleep(0.05)
print("streaming", flush=True)
time.sleep(300)
"""


def test_a_sigkilled_daemon_leaves_no_process_on_the_host(
    ssh_server: SshServer, fake_gpu: FakeGpu
) -> None:
    stream_live(fake_gpu)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ssh_server.port), str(ssh_server.client.path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "streaming"
        assert remote_processes(ssh_server)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert wait_for(lambda: not remote_processes(ssh_server), seconds=20), remote_processes(
            ssh_server
        )
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
