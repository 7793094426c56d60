"""Two real ``watchdog-gpu run`` daemons on one PostgreSQL server, under the faults that are not
crashes: a frozen leader, a leader cut off from the database (its connections blackholed or cut),
a database restarted and a database stopped for longer than any stall limit of the supervisor.

Each node reaches PostgreSQL through a TCP proxy the test controls, and its provider (Vast's API,
answered by a recording server of the test) on a port of its own, so every provider request is
known by node and instant. Every node logs ``leading node=… epoch=…`` when it takes the lead. In
every fault:

- the node that leads after the fault took over within its bound (``leader_lease`` plus two
  ticks for a silent leader; the database's return plus two ticks for an outage);
- no provider request of a node is sent after another node's epoch began, until the node leads
  again itself: exactly one node calls providers at any instant;
- no node exits: a deposed or cut-off leader stands by again in the same process.

Takeover figures are printed (docs/postgresql.md quotes them).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from tests.integration.test_postgres_daemons import environment
from tests.support.postgres import PostgresServer, running_postgres
from tests.support.tcp_proxy import TcpProxy
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import load_settings
from watchdog_gpu.supervisor import stall_limits

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

POLL_SECONDS = 2
LEASE_SECONDS = 3
WAIT_SECONDS = 90.0
# Past the supervisor's stall limits (STALL_MARGIN_SECONDS more than the longest): a node that
# counted waiting for the database as a stalled job would exit inside the outage.
STALL_MARGIN_SECONDS = 3 * POLL_SECONDS
_pause = threading.Event().wait
_LEADING = re.compile(r"time=(\S+) level=info logger=\S+ msg=leading node=(\S+) epoch=(\d+)")


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    node: str
    at: float  # wall-clock seconds
    path: str


class RecordingProvider:
    """Vast's API for one node: an empty account, every request recorded with its instant."""

    def __init__(self, node: str, requests: list[ProviderRequest]) -> None:
        record = requests.append

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                record(ProviderRequest(node, SystemClock().now().timestamp(), self.path))
                body = json.dumps(
                    {"instances": [], "volumes": [], "keys": [], "credit": 100.0, "balance": 0.0}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Node:
    """One ``watchdog-gpu run`` process behind its own database proxy and provider port."""

    def __init__(
        self, workdir: Path, name: str, database: PostgresServer, requests: list[ProviderRequest]
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.proxy = TcpProxy(database.port)
        self.provider = RecordingProvider(name, requests)
        url = database.url(DATABASE).replace(f":{database.port}/", f":{self.proxy.port}/")
        self.config = workdir / f"{name}.toml"
        self.config.write_text(
            f"""
[watchdog]
mode = "monitor"
poll_interval = "{POLL_SECONDS}s"
database_url = "{url}"
node_name = "{name}"
leader_lease = "{LEASE_SECONDS}s"

[metrics]
enabled = false

[probe]
enabled = false

[[accounts]]
name = "vast-main"
provider = "vast"
api_key = {{ env = "WD_TEST_VAST_KEY" }}
api_url = "http://127.0.0.1:{self.provider.port}"
retry_budget = "1s"
""",
            encoding="utf-8",
        )
        self.log_path = workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=environment(self.workdir),
            )

    @property
    def running(self) -> subprocess.Popen[bytes]:
        assert self.process is not None
        return self.process

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def epochs(self) -> list[tuple[float, int]]:
        """When this node took the lead, and with which epoch (from its log)."""
        found = []
        for stamp, node, epoch in _LEADING.findall(self.log()):
            if node == self.name:
                at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
                found.append((at, int(epoch)))
        return found

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=WAIT_SECONDS)
        self.proxy.close()
        self.provider.close()


DATABASE = "watchdog"


@dataclass
class Team:
    nodes: dict[str, Node]
    requests: list[ProviderRequest]

    def leader_epochs(self) -> list[tuple[float, int, str]]:
        return sorted(
            (at, epoch, name) for name, node in self.nodes.items() for at, epoch in node.epochs()
        )

    def current(self) -> tuple[str, int]:
        epochs = self.leader_epochs()
        assert epochs, "nobody led"
        _, epoch, name = epochs[-1]
        return name, epoch

    def wait_for(self, condition: Callable[[], bool], what: str) -> float:
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > WAIT_SECONDS:
                logs = "\n".join(f"--- {n}\n{node.log()[-3000:]}" for n, node in self.nodes.items())
                pytest.fail(f"{what} did not happen within {WAIT_SECONDS:.0f} s\n{logs}")
            _pause(0.05)
        return time.monotonic() - started

    def wait_for_new_epoch(self, than: int) -> tuple[str, int]:
        self.wait_for(lambda: self.leader_epochs()[-1][1] > than, f"an epoch after {than}")
        return self.current()

    def assert_one_caller_at_a_time(self) -> None:
        """Every provider request of a node lies inside one of its own leaderships: after it
        took the lead and before any later epoch began."""
        epochs = self.leader_epochs()
        for request in self.requests:
            before = [entry for entry in epochs if entry[0] <= request.at]
            assert before, f"{request.node} called {request.path} before anybody led"
            _, epoch, leader = before[-1]
            assert leader == request.node, (
                f"{request.node} called the provider ({request.path}) at {request.at:.3f}, "
                f"while {leader} led with epoch {epoch}"
            )

    def assert_everyone_alive(self) -> None:
        for name, node in self.nodes.items():
            assert node.running.poll() is None, f"{name} exited\n{node.log()[-3000:]}"


@contextlib.contextmanager
def team() -> Iterator[tuple[Team, PostgresServer]]:
    workdir = Path(tempfile.mkdtemp(prefix="watchdog-gpu-faults-"))
    with running_postgres(Path(tempfile.mkdtemp(prefix="watchdog-gpu-pg-"))) as server:
        with psycopg.connect(
            host="127.0.0.1", port=server.port, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{DATABASE}"')
        requests: list[ProviderRequest] = []
        nodes = {name: Node(workdir, name, server, requests) for name in ("node-a", "node-b")}
        crew = Team(nodes, requests)
        try:
            nodes["node-a"].start()
            crew.wait_for(lambda: bool(nodes["node-a"].epochs()), "node-a leading")
            nodes["node-b"].start()
            crew.wait_for(
                lambda: 'msg="standing by" node=node-b' in nodes["node-b"].log(),
                "node-b standing by",
            )
            crew.wait_for(lambda: len(requests) >= 2, "node-a polling")
            yield crew, server
        finally:
            for node in nodes.values():
                node.stop()


def _freeze_inside_a_transaction(crew: Team, leader: Node) -> float:
    """SIGSTOP ``leader`` at a moment one of its database sessions has a transaction open (seen
    by the server, through the ports of the leader's proxy); try again until one is caught.
    A tick's transactions are a percent or two of its poll interval: the attempts go on for
    a span of ticks (under CI's load 400 attempts once missed them all), not a count.
    Returns the instant (``time.monotonic()``) of the SIGSTOP that caught one."""
    server_port = leader.proxy.upstream_port
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        stopped = time.monotonic()
        leader.running.send_signal(signal.SIGSTOP)
        with psycopg.connect(
            host="127.0.0.1", port=server_port, user="postgres", dbname=DATABASE, autocommit=True
        ) as connection:
            open_transactions = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) "
                "AND xact_start IS NOT NULL",
                (sorted(leader.proxy.upstream_ports()),),
            ).fetchone()
        if open_transactions is not None and open_transactions[0] > 0:
            return stopped
        leader.running.send_signal(signal.SIGCONT)
        _pause(random.uniform(0.001, 0.05))
    pytest.fail(f"{leader.name} was never caught inside a transaction\n{leader.log()[-2000:]}")


def _silent_leader_fault(crew: Team, fault: str) -> float:
    """Apply ``fault`` to the current leader; returns the seconds to the next epoch."""
    name, epoch = crew.current()
    leader = crew.nodes[name]
    # The takeover is timed from the moment the leader went silent (the search for a moment
    # inside a transaction may take seconds of attempts before it).
    started = time.monotonic()
    if fault == "sigstop":
        leader.running.send_signal(signal.SIGSTOP)
    elif fault == "sigstop-in-transaction":
        started = _freeze_inside_a_transaction(crew, leader)
    elif fault == "blackhole":
        leader.proxy.blackhole()
    elif fault == "cut":
        leader.proxy.cut()
    crew.wait_for_new_epoch(epoch)
    took = time.monotonic() - started
    _pause(2 * POLL_SECONDS)  # the new leader polls while the old one is still frozen or cut
    if fault.startswith("sigstop"):
        leader.running.send_signal(signal.SIGCONT)
    elif fault == "blackhole":
        leader.proxy.heal()
    crew.wait_for(
        lambda: "leadership lost: standing by again" in leader.log(), f"{name} standing by"
    )
    _pause(2 * POLL_SECONDS)  # a thawed or healed leader would call now if it could
    return took


@pytest.mark.parametrize("fault", ["sigstop", "sigstop-in-transaction", "blackhole", "cut"])
def test_a_silent_or_cut_off_leader_is_replaced_and_never_calls_a_provider_after_it(
    fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    takeovers = []
    with team() as (crew, _server):
        for _ in range(3):
            takeovers.append(_silent_leader_fault(crew, fault))
        crew.assert_one_caller_at_a_time()
        crew.assert_everyone_alive()
    bound = LEASE_SECONDS + 2 * POLL_SECONDS if fault != "cut" else 2 * POLL_SECONDS
    with capsys.disabled():
        shown = ", ".join(f"{took:.1f}" for took in takeovers)
        print(f"\n{fault}: takeovers {shown} s (lease {LEASE_SECONDS} s, tick {POLL_SECONDS} s)")
    assert max(takeovers) < bound + 2, takeovers


def _outage_seconds(crew: Team) -> float:
    """Seconds a stopped database stays down: every stall limit of the nodes' supervisor, plus
    a margin (waiting out the database's outage is not a stall)."""
    limits = [stall_limits(load_settings(node.config, {})) for node in crew.nodes.values()]
    longest = max(max(limit.poll, limit.evaluate) for limit in limits)
    return longest.total_seconds() + STALL_MARGIN_SECONDS


@pytest.mark.parametrize("outage", ["restart", "stop"])
def test_a_database_outage_kills_no_node_and_one_node_leads_after_it(
    outage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with team() as (crew, server):
        _, epoch = crew.current()
        server.stop()
        _pause(2 if outage == "restart" else _outage_seconds(crew))
        crew.assert_everyone_alive()
        server.start_again()
        back = time.monotonic()
        crew.wait_for_new_epoch(epoch)
        took = time.monotonic() - back
        _pause(3 * POLL_SECONDS)
        crew.assert_one_caller_at_a_time()
        crew.assert_everyone_alive()
    with capsys.disabled():
        print(f"\ndatabase {outage}: a node led {took:.1f} s after the database was back")
    assert took < 2 * POLL_SECONDS + 5
