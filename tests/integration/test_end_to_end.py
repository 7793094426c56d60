"""End to end: ``watchdog-gpu run`` as a real subprocess against ``watchdog-gpu sim serve``
(another subprocess), probing GPUs through a real OpenSSH sshd on 127.0.0.1, notifying a phone
through Apprise's ``json://`` to a loopback HTTP receiver, exporting metrics linted by promtool.

The world (one scenario, one ``sim serve`` at real speed, offset 0 = the moment it started): two
Vast accounts, each with a *forgotten* instance whose GPU is idle from the start (its SSH endpoint
is the session's sshd, whose fake ``nvidia-smi`` replays an idle H100 capture) and a *busy* one
(a second sshd replaying the same H100 under load). With ``arm_after = 5s``, ``idle_minutes = 1``
and ``warn_before = 20s`` the warning is due about 45 s after the start, the destroy about 65 s,
and the simulated Vast removes the instance 30 s after the call; the re-listing that verifies it
(``verify_interval = 31s``) follows: about 100 s in all.

Two daemons share that timeline, one per account, started together by the module fixture so the
two ~100 s waits overlap instead of adding up:

- ``phone``: the receiver is up all along (the happy path: the warning is delivered before the
  destroy call goes out; metrics; SIGTERM);
- ``outage``: nothing listens on its route's port while the warning and the action message fall
  due; the receiver starts on that port only after the destroy is verified.

Delivery is at-least-once by design (a crash between the POST and marking the message delivered
resends it). Without a crash and with a receiver that answers at once a duplicate would be a bug
(a message claimed twice), so the outage test asserts *exactly once*: every message in the outbox
arrives, none twice.

Waits are bounded (``WAIT_SECONDS``); no durations are asserted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from tests.integration.conftest import FakeGpu, require_sshd
from tests.integration.sshd import SshServer
from tests.support.http_receiver import HttpReceiver, ReceivedRequest, free_port
from tests.support.requirements import require_program
from watchdog_gpu.action_steps import episode_key_of
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.errors import StoreError
from watchdog_gpu.model import ActionKind, ActionStatus, InstanceState
from watchdog_gpu.notify.render import notification_key
from watchdog_gpu.providers import PROVIDERS, new_http_client
from watchdog_gpu.store import Store, create_engine_for, sqlite_url

# The waits below, not pytest-timeout's default 300 s, bound how long the test may take.
pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.timeout(900)]

# The timeline needs ~100 s. The test command runs the suite on every core, so these daemons
# share the machine with other tests' work and fall behind their timeline: in one CI run the
# warning went out ~60 s and the destroy call ~60 s later than on an idle machine. The slack is
# for that; no duration is asserted.
WAIT_SECONDS = 300.0
STOP_SECONDS = 60.0
CLOCK = SystemClock()  # real processes take real time
IDLE_DMON = "nvidia-smi/dmon_default_1gpu_idle_h100_590.48.01.txt"
BUSY_DMON = "nvidia-smi/dmon_default_1gpu_load_h100_590.48.01.txt"
PHONE_PATH = "/phone"


@dataclass(frozen=True, slots=True)
class Account:
    """One simulated Vast account: its key and its forgotten (idle) and busy instances."""

    name: str
    api_key: str
    idle_id: str
    busy_id: str


PHONE = Account("vast-phone", "e2e-phone-4f1c9a7d2b", "101", "102")
OUTAGE = Account("vast-outage", "e2e-outage-8d3e6b0a5c", "201", "202")


@dataclass
class DaemonRun:
    """One ``watchdog-gpu run`` process watching one account."""

    account: Account
    process: subprocess.Popen[bytes]
    log_path: Path
    database: Path
    metrics_port: int
    notify_port: int
    vast_url: str

    def engine(self) -> Engine:
        return create_engine_for(sqlite_url(self.database))

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class World:
    phone: DaemonRun
    phone_receiver: HttpReceiver
    outage: DaemonRun


# -- the world ----------------------------------------------------------------------------------


def scenario_text(idle_port: int, busy_port: int) -> str:
    accounts = []
    for account in (PHONE, OUTAGE):
        accounts.append(
            f"""
[[accounts]]
name = "{account.name}"
provider = "vast"
api_key = "{account.api_key}"
balance_usd = 500.0

[[accounts.instances]]
id = "{account.idle_id}"
name = "forgotten"
gpu_name = "H100 SXM"
compute_usd_per_hour = 2.10
disk_gb = 100
storage_usd_per_gb_month = 0.20
ssh_host = "127.0.0.1"
ssh_port = {idle_port}
events = [{{ at = "0s", state = "running", gpu_util = 0 }}]

[[accounts.instances]]
id = "{account.busy_id}"
name = "training"
gpu_name = "H100 SXM"
compute_usd_per_hour = 2.10
disk_gb = 100
storage_usd_per_gb_month = 0.20
ssh_host = "127.0.0.1"
ssh_port = {busy_port}
events = [{{ at = "0s", state = "running", gpu_util = 100 }}]
"""
        )
    return 'name = "end-to-end"\nstart = "2026-03-02T20:00:00Z"\nduration = "2h"\n' + "".join(
        accounts
    )


def config_text(
    account: Account, vast_url: str, key_file: Path, database: Path, *, metrics: int, notify: int
) -> str:
    return f"""
[watchdog]
mode = "enforce"
poll_interval = "2s"
probe_interval = "2s"
database_url = "{sqlite_url(database)}"

[metrics]
listen_address = "127.0.0.1"
port = {metrics}

[[accounts]]
name = "{account.name}"
provider = "vast"
api_key = "{account.api_key}"
api_url = "{vast_url}"
request_timeout = "10s"
retry_budget = "10s"

[accounts.ssh]
user = "root"
key_file = "{key_file}"

[probe]
samples_per_probe = 2
sample_interval_seconds = 1
connect_timeout = "5s"
banner_timeout = "5s"
auth_timeout = "5s"
command_deadline = "15s"

[rules.idle_gpu]
idle_minutes = 1
arm_after = "5s"
warn_before = "20s"
max_sample_gap = "10s"

[safety]
verify_interval = "31s"

[notify]
retry_initial = "1s"
retry_max = "2s"
timeout = "5s"

[[notify.routes]]
url = "json://127.0.0.1:{notify}{PHONE_PATH}"
"""


def child_environment(home: Path) -> dict[str, str]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WATCHDOG_GPU_")
        and name not in {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "CREDENTIALS_DIRECTORY"}
    }
    environ["HOME"] = str(home)
    return environ


def start_sim(scenario: Path, environ: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``sim serve`` at real speed; returns the process and the Vast URL it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", "sim", "serve", "--scenario", str(scenario)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=environ,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        process.wait(timeout=10)
        pytest.fail("sim serve printed no URLs")
    return process, json.loads(line)["vast"]


def start_daemon(
    workdir: Path, account: Account, vast_url: str, key_file: Path, notify_port: int
) -> DaemonRun:
    workdir.mkdir()
    database = workdir / "state" / "watchdog-gpu.db"
    metrics_port = free_port()
    config = workdir / "config.toml"
    config.write_text(
        config_text(
            account, vast_url, key_file, database, metrics=metrics_port, notify=notify_port
        ),
        encoding="utf-8",
    )
    log_path = workdir / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_environment(workdir / "home"),
        )
    return DaemonRun(account, process, log_path, database, metrics_port, notify_port, vast_url)


def end_process(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def world(ssh_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Both sshds, ``sim serve`` and both daemons, started together (see the module doc)."""
    root = tmp_path_factory.mktemp("end-to-end")
    idle_gpu = FakeGpu(ssh_server.state_dir)
    idle_gpu.reset()
    # A live dmon (the streaming probe): one row a second for as long as the session lasts.
    idle_gpu.replay("dmon", IDLE_DMON, pace_seconds=1, forever=0)
    busy_dir = root / "busy-sshd"
    busy_dir.mkdir(mode=0o700)
    busy_host = SshServer(require_sshd(), busy_dir, client=ssh_server.client)
    FakeGpu(busy_host.state_dir).replay("dmon", BUSY_DMON, pace_seconds=1, forever=0)
    busy_host.start()
    scenario = root / "scenario.toml"
    scenario.write_text(scenario_text(ssh_server.port, busy_host.port), encoding="utf-8")
    sim, vast_url = start_sim(scenario, child_environment(root / "sim-home"))
    daemons: list[DaemonRun] = []
    try:
        with HttpReceiver() as phone_receiver:
            key = ssh_server.client.path
            daemons.append(start_daemon(root / "phone", PHONE, vast_url, key, phone_receiver.port))
            daemons.append(start_daemon(root / "outage", OUTAGE, vast_url, key, free_port()))
            yield World(daemons[0], phone_receiver, daemons[1])
    finally:
        for daemon in daemons:
            end_process(daemon.process)
        end_process(sim)
        if sim.stdout is not None:
            sim.stdout.close()
        busy_host.stop()
        idle_gpu.reset()


# -- looking at it ------------------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str, run: DaemonRun) -> None:
    """Poll ``condition`` until true; fail (with the daemon's log) after ``WAIT_SECONDS`` or if
    the daemon exits first. A database still being migrated counts as "not yet"."""
    deadline = CLOCK.monotonic() + WAIT_SECONDS
    while CLOCK.monotonic() < deadline:
        try:
            if condition():
                return
        except (StoreError, OperationalError):
            pass
        if run.process.poll() is not None:
            pytest.fail(
                f"the daemon exited ({run.process.returncode}) before {what}:\n{run.log()[-4000:]}"
            )
        CLOCK.sleep(0.2)
    pytest.fail(f"gave up waiting for {what}; daemon log tail:\n{run.log()[-4000:]}")


def verified_destroys(store: Store) -> list[tuple[str, str, str]]:
    return [
        (row.account, row.instance_id, row.rule)
        for row in store.list_actions([ActionStatus.VERIFIED])
        if row.kind is ActionKind.DESTROY
    ]


def outbox(engine: Engine) -> list[tuple[str, str, bool]]:
    """Every message the daemon enqueued: (key, title, delivered)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT idempotency_key, title, delivered_at FROM notifications ORDER BY id")
        )
        return [(key, title, delivered is not None) for key, title, delivered in rows]


_BATCH_TITLE = re.compile(r"^\d+ (updates|warnings|alerts): ")
_BATCH_SECTION = re.compile(r"^\[\d+/\d+\] (.+)$", flags=re.MULTILINE)


def titles(requests: list[ReceivedRequest]) -> list[str]:
    """The titles of the messages Apprise posted (its json:// body: version, title, message,
    type ...); a batched push (``N warnings: …``, one push per delivery pass and severity)
    counts as the messages it carries, each section starting ``[n/N] title``."""
    found = []
    for request in requests:
        assert request.method == "POST"
        assert request.content_type.startswith("application/json")
        posted = json.loads(request.body)
        if _BATCH_TITLE.match(posted["title"]):
            sections = _BATCH_SECTION.findall(posted["message"])
            assert sections, posted
            found.extend(sections)
        else:
            found.append(posted["title"])
    return found


def warning_title(account: Account) -> Callable[[str], bool]:
    subject = f"{account.name}/{account.idle_id} will be destroyed"
    return lambda title: title.startswith(subject) and title.endswith(": idle_gpu")


def action_title(account: Account) -> Callable[[str], bool]:
    return lambda title: (
        title == f'Destroyed {account.name}/{account.idle_id} "forgotten": idle_gpu'
    )


def sim_listing(run: DaemonRun) -> dict[str, InstanceState]:
    """What the simulated Vast lists for the account now, read with the real Vast client."""
    client = new_http_client(run.vast_url, timeout=httpx.Timeout(10.0))
    try:
        provider = PROVIDERS["vast"](
            run.account.name,
            client,
            run.account.api_key,
            sleep=CLOCK.sleep,
            monotonic=CLOCK.monotonic,
            retry_budget_seconds=10,
        )
        listed = provider.list_instances(CLOCK.now())
    finally:
        client.close()
    return {snapshot.instance_id: snapshot.state for snapshot in listed}


def stop_daemon(run: DaemonRun) -> str:
    """SIGTERM; the daemon must exit 0 within ``STOP_SECONDS``. Returns its whole log."""
    run.process.send_signal(signal.SIGTERM)
    try:
        run.process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the daemon did not stop on SIGTERM:\n{run.log()[-4000:]}")
    output = run.log()
    assert run.process.returncode == 0, output[-4000:]
    assert "stopping reason=SIGTERM" in output
    assert "Traceback" not in output
    assert run.account.api_key not in output
    return output


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.prometheus
def test_the_forgotten_instance_is_destroyed_the_phone_is_told_and_the_daemon_stops_cleanly(
    world: World,
) -> None:
    promtool = require_program("promtool", hint="Debian package prometheus")
    run, account, receiver = world.phone, PHONE, world.phone_receiver
    engine = run.engine()
    try:
        store = Store(engine)
        wait_until(
            lambda: (account.name, account.idle_id, "idle_gpu") in verified_destroys(store),
            "the idle instance's destroy to be verified",
            run,
        )
        wait_until(
            lambda: any(map(action_title(account), titles(receiver.received(PHONE_PATH)))),
            "the action message at the phone",
            run,
        )
        actions = store.list_actions()
        warning = store.get_notification(notification_key(episode_key_of(actions[0]), "warning"))
        called_at = [
            event.at
            for event in store.list_audit_events(account=account.name, instance_id=account.idle_id)
            if event.kind == "provider_called"
        ]
        scrape = httpx.get(f"http://127.0.0.1:{run.metrics_port}/metrics", timeout=10).text
        lint = subprocess.run(
            [promtool, "check", "metrics"],
            input=scrape,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        listing = sim_listing(run)
        output = stop_daemon(run)
    finally:
        engine.dispose()

    received = titles(receiver.received(PHONE_PATH))
    assert sum(map(warning_title(account), received)) == 1, received
    assert sum(map(action_title(account), received)) == 1, received
    assert not [title for title in received if f"{account.name}/{account.busy_id}" in title]
    assert [(a.instance_id, a.kind, a.dry_run) for a in actions] == [
        (account.idle_id, ActionKind.DESTROY, False)
    ]
    # The grace warning reached the phone before the destroy call went out.
    assert warning is not None
    assert warning_title(account)(warning.title)
    assert warning.delivered_at is not None
    assert len(called_at) == 1
    assert warning.delivered_at < called_at[0]
    assert listing == {account.busy_id: InstanceState.RUNNING}
    assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", "")
    assert (
        f'watchdog_gpu_actions_total{{account="{account.name}",action="destroy",'
        'outcome="verified",rule="idle_gpu"} 1.0' in scrape
    )
    assert "msg=stopped" in output


def test_messages_due_while_the_phone_is_unreachable_all_arrive_once_it_is_back(
    world: World,
) -> None:
    run, account = world.outage, OUTAGE
    engine = run.engine()
    try:
        store = Store(engine)
        wait_until(
            lambda: (account.name, account.idle_id, "idle_gpu") in verified_destroys(store),
            "the idle instance's destroy to be verified",
            run,
        )
        wait_until(
            lambda: any(action_title(account)(title) for _, title, _ in outbox(engine)),
            "the action message in the outbox",
            run,
        )
        before = outbox(engine)
        with HttpReceiver(port=run.notify_port) as receiver:
            wait_until(lambda: all(delivered for *_, delivered in outbox(engine)), "delivery", run)
            stop_daemon(run)  # nothing can arrive after this: the counts below are final
            received = titles(receiver.received(PHONE_PATH))
        after = outbox(engine)
    finally:
        engine.dispose()

    # The warning and the action message were due, and undeliverable, while the phone was down.
    undelivered = [title for _, title, delivered in before if not delivered]
    assert sum(map(warning_title(account), undelivered)) == 1, before
    assert sum(map(action_title(account), undelivered)) == 1, before
    assert "notification delivery failed" in run.log()
    # Every message the daemon ever enqueued arrived, and none twice.
    assert Counter(received) == Counter(title for _, title, _ in after)
    assert all(delivered for *_, delivered in after)
    assert sim_listing(run) == {account.busy_id: InstanceState.RUNNING}
    assert not [title for title in received if f"{account.name}/{account.busy_id}" in title]
