"""The two read paths of a SQLite database agree: the SQLAlchemy ``Store`` and the standard
library's ``SqliteReader`` (what ``status`` reads with, ``store/sqlite_reader.py``) return equal
values for the same file — the demo night's database, simulated scenarios', and randomized stores
written by the real repository — and ``status`` prints the same bytes through either."""

from __future__ import annotations

import dataclasses
import itertools
import random
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar
from unittest import mock

import pytest

from tests.integration.cli_support import freeze_clock, isolate, run
from tests.integration.store_builders import T0, minutes, planned_notification
from watchdog_gpu.cli import main
from watchdog_gpu.commands.gpu_activity import gpu_activity
from watchdog_gpu.errors import SchemaTooNewError
from watchdog_gpu.fleet import FleetView, ProtectionKind
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    ActionKind,
    ActionStatus,
    Finding,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    PlannedAction,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Severity,
    SshKeyRecord,
    Verdict,
    VolumeSnapshot,
)
from watchdog_gpu.rules.idle_clock import IdleClockSettings
from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store import sqlite_reader as sqlite_reader_module
from watchdog_gpu.store.revisions import shipped_history
from watchdog_gpu.store.sqlite_reader import SqliteReader, open_sqlite_reader
from watchdog_gpu.store.values import ACTIONS_DEFERRED

T = TypeVar("T")
REPOSITORY = Path(__file__).resolve().parents[2]
SCENARIOS = ("fuse_trip", "protected_idle", "stopped_disk", "monitor_mode", "ssh_down", "idle_wave")
LOOKBACKS = (timedelta(minutes=5), timedelta(hours=1, minutes=13), timedelta(days=2))


def typed(value: object) -> object:
    """``value`` with the type of every part spelled out: ``==`` takes ``1`` for ``True`` and
    ``3`` for ``3.0``, and JSON output does not."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = tuple((f.name, typed(getattr(value, f.name))) for f in dataclasses.fields(value))
        return (type(value).__name__, parts)
    if isinstance(value, Mapping):
        return ("mapping", sorted((repr(k), typed(v)) for k, v in value.items()))
    if isinstance(value, frozenset | set):
        return ("set", sorted(repr(typed(item)) for item in value))
    if isinstance(value, Sequence) and not isinstance(value, str):
        return (type(value).__name__, [typed(item) for item in value])
    return (type(value).__name__, value)


def assert_same(read: object, expected: object) -> None:
    assert read == expected
    assert typed(read) == typed(expected)


def open_both(path: Path) -> tuple[Store, SqliteReader]:
    reader = open_sqlite_reader(path, sqlite_url(path))
    assert reader is not None, "the database is at head: the sqlite3 path reads it"
    return Store(create_engine_for(sqlite_url(path))), reader


def fresh_store(path: Path) -> Store:
    """A Store as ``status`` opens one: nothing cached yet."""
    return Store(create_engine_for(sqlite_url(path)))


def latest_moment(store: Store) -> datetime:
    moments = [record.last_seen for record in store.latest_instances(include_gone=True)]
    for account in store.latest_accounts():
        moments += [t for t in (account.view.last_poll_ok_at, account.view.last_poll_error_at) if t]
    return max(moments, default=T0)


def assert_same_reads(path: Path) -> None:
    """Every read of the protocol, both ways, at several moments and windows."""
    store, reader = open_both(path)
    with reader:
        assert_same(reader.latest_accounts(), store.latest_accounts())
        for gone in (False, True):
            assert_same(
                reader.latest_instances(include_gone=gone),
                store.latest_instances(include_gone=gone),
            )
        assert_same(reader.latest_seen(), store.latest_seen())
        present = [record.last_seen for record in store.latest_instances()]
        assert store.latest_seen() == max(present, default=None)
        assert_same(reader.fuse_latched(), store.fuse_latched())
        assert_same(reader.leader(), store.leader())
        assert_same(reader.list_findings(), store.list_findings())
        assert_same(reader.list_actions(), store.list_actions())
        end = latest_moment(store)
        edges = sample_times(path)
        for status in ([ActionStatus.BLOCKED], [ActionStatus.PENDING, ActionStatus.VERIFIED], []):
            assert_same(reader.list_actions(statuses=status), store.list_actions(statuses=status))
        for moment in (end, end - timedelta(minutes=37), end + timedelta(hours=3), *edges):
            assert_same(reader.list_findings(seen_since=moment), store.list_findings(moment))
            assert_same(reader.list_actions(since=moment), store.list_actions(since=moment))
            for lookback in LOOKBACKS:
                expected = fresh_store(path).load_fleet_view(moment, lookback, moment - lookback)
                read = reader.load_fleet_view(moment, lookback, moment - lookback)
                assert_same(read, expected)
                assert_same_status_views(reader, expected, lookback)
        for edge in edges:  # a window that starts exactly at a recorded sample
            lookback = LOOKBACKS[0]
            expected = fresh_store(path).load_fleet_view(edge + lookback, lookback, edge)
            assert_same(reader.load_fleet_view(edge + lookback, lookback, edge), expected)
        instances = store.latest_instances(include_gone=True)
        subjects = [(None, None)] + [
            (r.snapshot.account, r.snapshot.instance_id) for r in instances[:3]
        ]
        for since in (None, end - timedelta(minutes=37), *edges[:1]):
            for limit in (None, 1, 5):
                for account, instance_id in subjects:
                    assert_same(
                        reader.list_audit_events(
                            since, limit, account=account, instance_id=instance_id
                        ),
                        store.list_audit_events(
                            since, limit, account=account, instance_id=instance_id
                        ),
                    )
        names = {account.view.account: account.view.provider for account in store.latest_accounts()}
        some = dict(list(names.items())[:1]) | {"never-polled": "vast"}
        expected = fresh_store(path).load_fleet_view(
            end, LOOKBACKS[1], end - timedelta(days=1), some
        )
        assert_same(
            reader.load_fleet_view(end, LOOKBACKS[1], end - timedelta(days=1), some), expected
        )


# Thresholds equal to recorded values (0, 3, 55.5) tell ``>`` from ``>=``; 2 makes the quiet
# instances' 3 % samples busy.
STATUS_THRESHOLDS = (0.0, 2.0, 3.0, 55.5)


def without_samples(view: FleetView) -> FleetView:
    instances = {
        key: dataclasses.replace(instance, samples=()) for key, instance in view.instances.items()
    }
    return dataclasses.replace(view, instances=instances)


# The recent slice of the reduced load's grouped pass (``sqlite_reader.STATUS_RECENT``): none
# (every sample in the older part), a few sampling steps, the default, and longer than any
# window (no older part).
RECENT_SLICES = (
    timedelta(0),
    timedelta(minutes=7),
    sqlite_reader_module.STATUS_RECENT,
    timedelta(days=3),
)


def judged_at(threshold: float) -> IdleClockSettings:
    """The idle clock's default settings with ``threshold``."""
    return IdleClockSettings(threshold_percent=threshold)


def assert_same_status_views(reader: SqliteReader, full: FleetView, lookback: timedelta) -> None:
    """``status``'s reduced sample load (``load_status_view``) gives every instance the same
    ``gpu_activity`` as the whole window, at every threshold and wherever its grouped pass
    splits the window; the rest of the view is equal. Every threshold with the default split,
    every split at two thresholds (the lowest, where any activity counts, and a high one): a
    split and a threshold meet only in which rows the older part skips."""
    now = full.now
    default = sqlite_reader_module.STATUS_RECENT
    combinations = {(threshold, default) for threshold in STATUS_THRESHOLDS} | set(
        itertools.product((STATUS_THRESHOLDS[0], STATUS_THRESHOLDS[-1]), RECENT_SLICES)
    )
    for threshold, recent in sorted(combinations):
        with mock.patch.object(sqlite_reader_module, "STATUS_RECENT", recent):
            reduced = reader.load_status_view(now, lookback, now - lookback, threshold)
        assert_same(without_samples(reduced), without_samples(full))
        for key, instance in full.instances.items():
            assert_same(
                gpu_activity(reduced.instances[key], now, judged_at(threshold)),
                gpu_activity(instance, now, judged_at(threshold)),
            )
            assert len(reduced.instances[key].samples) <= len(instance.samples)


def sample_times(path: Path) -> list[datetime]:
    """A few instants at which samples were recorded: windows that start or end exactly there
    test both paths' bounds."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT DISTINCT at FROM gpu_samples ORDER BY at").fetchall()
    times = [datetime.fromisoformat(at).replace(tzinfo=UTC) for (at,) in rows]
    return times[:: max(1, len(times) // 3)][:4]


def simulated(tmp_path: Path, scenario: Path, name: str) -> Path:
    database = tmp_path / f"{name}.db"
    assert main(["simulate", "--scenario", str(scenario), "--db", str(database)]) == 0
    return database


# -- the demo night and simulated scenarios -----------------------------------------------------


@pytest.fixture(scope="module")
def demo_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The database the demo's night leaves, written by the scenario runner."""
    directory = tmp_path_factory.mktemp("demo")
    return simulated(directory, REPOSITORY / "watchdog_gpu" / "sim" / "demo_night.toml", "demo")


@pytest.mark.slow
def test_the_demo_nights_database_reads_the_same_both_ways(demo_database: Path) -> None:
    store = fresh_store(demo_database)
    assert store.latest_instances(include_gone=True), "the night recorded instances"
    assert store.list_actions(), "and acted"
    assert_same_reads(demo_database)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["status", "--json"], ["status"], ["events", "--json"], ["events", "--limit", "30"]],
    ids=" ".join,
)
def test_status_and_events_print_the_same_bytes_through_either_path(
    demo_database: Path,
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch, T0)
    argv = [command[0], "--db", str(demo_database), *command[1:]]
    through_sqlite3 = run(capsys, *argv)
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_reader_module, "open_sqlite_reader", lambda path, shown: None)
        through_store = run(capsys, *argv)
    assert through_sqlite3.code == through_store.code == 0
    assert through_sqlite3.out == through_store.out
    assert len(through_sqlite3.out.splitlines()) > 5


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_a_simulated_scenarios_database_reads_the_same_both_ways(name: str, tmp_path: Path) -> None:
    database = simulated(tmp_path, REPOSITORY / "tests" / "scenarios" / f"{name}.toml", name)
    assert_same_reads(database)


# -- randomized stores --------------------------------------------------------------------------

ACCOUNTS = (("vast-a", "vast"), ("runpod-b", "runpod"), ("lambda-c", "lambda"))


def maybe(rng: random.Random, value: T, none_share: float = 0.3) -> T | None:
    return None if rng.random() < none_share else value


def random_instance(
    rng: random.Random, account: str, provider: str, number: int, at: datetime
) -> InstanceSnapshot:
    state = rng.choice([s for s in InstanceState if s is not InstanceState.GONE])
    return InstanceSnapshot(
        provider=provider,
        account=account,
        instance_id=f"i{number}",
        name=rng.choice([f"job-{number}", "keep-me", "", "ünïcode ✓"]),
        state=state,
        raw_state=state.value if rng.random() < 0.8 else "weird_state",
        observed_at=at,
        interruptible=rng.random() < 0.5,
        compute_usd_per_hour=maybe(rng, rng.choice([0.5, 2.0, 1.0 / 3.0, 3])),
        storage_usd_per_hour=maybe(rng, rng.choice([0.02, 0.0, 1])),
        disk_gb=maybe(rng, rng.choice([100.0, 25])),
        gpu_name=maybe(rng, "RTX 4090"),
        gpu_count=maybe(rng, rng.randint(1, 8)),
        ssh_host=maybe(rng, "127.0.0.1"),
        ssh_port=maybe(rng, rng.randint(1024, 65535)),
        ssh_user=maybe(rng, "root"),
        created_at=maybe(rng, at - timedelta(hours=rng.randint(1, 50))),
        started_at=maybe(rng, at - timedelta(minutes=rng.randint(1, 500))),
        provider_gpu_util_percent=maybe(rng, (rng.choice([12.0, 0, 99.5]), None)),
        public_ports=tuple(rng.sample([22, 8888, 6006, 443], rng.randint(0, 3))),
        labels={"team": "vision"} if rng.random() < 0.5 else {},
    )


def random_samples(
    rng: random.Random, account: str, instance_id: str, at: datetime
) -> tuple[GpuSample, ...]:
    """Random samples; every third instance's are idle or low (recorded busy below some
    thresholds, never NULL sm), so that windows without a non-idle sample occur."""
    samples = []
    quiet = int(instance_id.removeprefix("i")) % 3 == 0
    for gpu in range(rng.randint(0, 2)):
        if quiet:
            sm: float | None = rng.choice([0.0, 3.0])
            verdict = rng.choice([Verdict.IDLE, Verdict.IDLE, Verdict.BUSY])
        else:
            sm = maybe(rng, rng.choice([0.0, 3.0, 55.5, 100]))
            verdict = rng.choice(list(Verdict))
        covered = rng.random() < 0.3
        samples.append(
            GpuSample(
                account=account,
                instance_id=instance_id,
                at=at,
                gpu_index=gpu,
                verdict=verdict,
                source=rng.choice(list(SampleSource)),
                sm=sm,
                mem=maybe(rng, 1.0),
                enc=maybe(rng, 0.0),
                dec=maybe(rng, 0.0),
                jpg=maybe(rng, 0.0, 0.7),
                ofa=maybe(rng, 0.0, 0.7),
                covers_from=at - timedelta(seconds=rng.randint(1, 59)) if covered else None,
            )
        )
    return tuple(samples)


def write_random_store(store: Store, seed: int) -> None:
    """Ticks of polls, probes (with samples, across any lookback's edge), findings, outbox
    actions in every status, notifications, snoozes, protections, fuse events, deferrals."""
    rng = random.Random(seed)
    instances: dict[str, list[int]] = {account: [] for account, _ in ACCOUNTS}
    number = 0
    for tick in range(rng.randint(4, 14)):
        at = (
            T0
            + minutes(tick * rng.choice([1, 7, 30]))
            + timedelta(microseconds=rng.randint(0, 999_999))
        )
        for account, provider in ACCOUNTS:
            if rng.random() < 0.15:
                store.record_poll_failure(account, provider, "timeout", "read timed out", at)
                continue
            if rng.random() < 0.5 or not instances[account]:
                number += 1
                instances[account].append(number)
            if rng.random() < 0.2 and len(instances[account]) > 1:
                instances[account].remove(rng.choice(instances[account]))  # gone
            snapshots = tuple(
                random_instance(rng, account, provider, n, at) for n in instances[account]
            )
            store.record_observation(
                AccountObservation(
                    account=AccountSnapshot(
                        provider=provider,
                        account=account,
                        observed_at=at,
                        balance_usd=maybe(rng, rng.choice([25.0, 0.0, 1234.5])),
                        spend_usd_per_hour=maybe(rng, 1.04),
                        spend_limit_usd_per_hour=maybe(rng, 5.0, 0.7),
                        autopay_enabled=maybe(rng, rng.random() < 0.5),
                    ),
                    instances=snapshots,
                    volumes=tuple(
                        VolumeSnapshot(
                            provider=provider,
                            account=account,
                            volume_id=f"v{v}",
                            name=f"vol-{v}",
                            observed_at=at,
                            size_gb=maybe(rng, 50.0),
                            usd_per_hour=maybe(rng, 0.01),
                            attached=maybe(rng, rng.random() < 0.5),
                        )
                        for v in range(rng.randint(0, 2))
                    ),
                    ssh_keys=tuple(
                        SshKeyRecord(
                            provider=provider,
                            account=account,
                            key_id=f"k{k}",
                            name=f"key-{k}",
                            public_key="ssh-ed25519 AAAA",
                        )
                        for k in range(rng.randint(0, 2))
                    ),
                ),
                at,
            )
            probes = []
            for n in instances[account]:
                if rng.random() < 0.7:
                    status = rng.choice(list(ProbeStatus))
                    probes.append(
                        ProbeOutcome(
                            account=account,
                            instance_id=f"i{n}",
                            at=at,
                            status=status,
                            duration_seconds=rng.choice([1.5, 0.0, 10]),
                            detail=rng.choice(["", "connection refused"]),
                            samples=random_samples(rng, account, f"i{n}", at)
                            if status is ProbeStatus.OK
                            else (),
                            interactive_login=maybe(rng, rng.random() < 0.5),
                            mode=maybe(rng, rng.choice(["stream", "burst"])),
                        )
                    )
            store.record_probes(probes)
            findings = []
            for n in instances[account]:
                if rng.random() < 0.3:
                    started = at - minutes(rng.randint(0, 90))
                    findings.append(
                        Finding(
                            rule=rng.choice(["idle_gpu", "stopped_disk", "max_runtime", "budget"]),
                            account=account,
                            instance_id=f"i{n}" if rng.random() < 0.9 else None,
                            severity=rng.choice(list(Severity)),
                            action=rng.choice(list(ActionKind)),
                            summary="GPU idle",
                            episode_started_at=started,
                            due_at=started + minutes(rng.randint(10, 60)),
                            evidence={"idle_minutes": rng.randint(0, 60), "armed": True, "x": None},
                            usd_per_hour_at_stake=maybe(rng, 0.52),
                        )
                    )
            store.record_findings(findings, at)
            for n in instances[account]:
                if rng.random() < 0.2:
                    key = f"idle_gpu:{account}/i{n}:{at.isoformat()}:destroy"
                    outbox_status = rng.choice(list(ActionStatus))
                    store.enqueue_action(
                        PlannedAction(
                            idempotency_key=key,
                            account=account,
                            instance_id=f"i{n}",
                            rule="idle_gpu",
                            kind=rng.choice([ActionKind.STOP, ActionKind.DESTROY]),
                            dry_run=rng.random() < 0.3,
                            reason="idle",
                            planned_at=at - timedelta(hours=rng.choice([0, 0, 30])),
                            episode_key=key.removesuffix(":destroy"),
                            evidence={"idle_minutes": 31, "nested": "no"},
                            usd_per_hour_at_stake=maybe(rng, 0.52),
                        ),
                        outbox_status,
                    )
                if rng.random() < 0.1:
                    store.add_snooze(
                        account, f"i{n}", at + minutes(rng.randint(1, 300)), at, "later"
                    )
            if rng.random() < 0.2:
                store.add_protection(
                    rng.choice(list(ProtectionKind)),
                    rng.choice(["keep-*", "i3", account]),
                    at,
                    account=rng.choice([None, account]),
                    reason="mine",
                )
        if rng.random() < 0.2:
            store.enqueue_notification(planned_notification(f"note-{tick}", at=at))
        if rng.random() < 0.15:
            store.record_fuse_trip(at, "too many", planned_notification(f"fuse-{tick}", at=at))
        elif rng.random() < 0.1:
            store.reset_fuse(at)
        if rng.random() < 0.2:
            store.add_audit_event(ACTIONS_DEFERRED, at, message="deferred", data={"n": 3})


def write_leader(path: Path, seed: int) -> None:
    """A leadership row (PostgreSQL teams write it; the table exists on SQLite too)."""
    if seed % 2:
        return
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO leadership (id, epoch, node, since, renewed_at) VALUES (1, ?, ?, ?, ?)",
            (seed + 1, f"node-{seed}", "2026-03-01 12:00:00.000000", "2026-03-01 12:05:00.250000"),
        )


@pytest.mark.parametrize("seed", range(12))
def test_a_randomized_store_reads_the_same_both_ways(seed: int, tmp_path: Path) -> None:
    path = tmp_path / "random.db"
    engine = create_engine_for(sqlite_url(path))
    upgrade_to_head(engine)
    write_random_store(Store(engine), seed)
    engine.dispose()
    write_leader(path, seed)
    assert_same_reads(path)


# -- status's reduced sample load -----------------------------------------------------------

MOODS = ("quiet", "wakes", "sleeps", "mixed", "gpu_stops")


def status_sample(
    rng: random.Random, mood: str, instance_id: str, at: datetime, *, gpu: int, minute: int
) -> GpuSample | None:
    """One GPU's sample of a ``mood``: quiet (idle or recorded busy at 0 or 3 %, never NULL sm),
    wakes (idle, then busy from a minute on), sleeps (busy, then idle), mixed (anything: NULL
    sm, unknown, recorded busy below the thresholds), gpu_stops (GPU 1 stops reporting)."""
    if mood == "gpu_stops" and gpu == 1 and minute > 60:
        return None
    verdict = rng.choice([Verdict.IDLE, Verdict.IDLE, Verdict.BUSY])
    sm: float | None = rng.choice([0.0, 3.0])
    if (mood == "wakes" and minute > 85) or (mood == "sleeps" and minute < 40):
        verdict, sm = Verdict.BUSY, rng.choice([55.5, 100.0])
    elif mood in ("mixed", "gpu_stops") and rng.random() < 0.3:
        verdict, sm = rng.choice(list(Verdict)), maybe(rng, rng.choice([0.0, 3.0, 55.5]))
    return GpuSample(
        account="vast-a",
        instance_id=instance_id,
        at=at,
        gpu_index=gpu,
        verdict=verdict,
        source=SampleSource.DMON,
        sm=sm,
        mem=1.0,
        enc=maybe(rng, rng.choice([0.0, 3.0])),
        dec=maybe(rng, 0.0),
        jpg=None,
        ofa=maybe(rng, 0.0, 0.7),
    )


def write_status_store(path: Path, seed: int) -> None:
    """Running instances of every mood, sampled each minute for 100 minutes (2 GPUs)."""
    rng = random.Random(seed)
    engine = create_engine_for(sqlite_url(path))
    upgrade_to_head(engine)
    store = Store(engine)
    moods = {f"i{n}": MOODS[n % len(MOODS)] for n in range(15)}
    for minute in range(100):
        at = T0 + minutes(minute)
        if minute in (0, 99):
            snapshots = tuple(
                dataclasses.replace(
                    random_instance(rng, "vast-a", "vast", int(name[1:]), at),
                    state=InstanceState.RUNNING,
                )
                for name in moods
            )
            store.record_observation(
                AccountObservation(
                    account=AccountSnapshot(provider="vast", account="vast-a", observed_at=at),
                    instances=snapshots,
                ),
                at,
            )
        samples = [
            status_sample(rng, mood, name, at + jitter, gpu=gpu, minute=minute)
            for name, mood in moods.items()
            for gpu in range(2)
            for jitter in [timedelta(microseconds=rng.randint(0, 9))]
        ]
        store.record_samples(sample for sample in samples if sample is not None)
    engine.dispose()


@pytest.mark.parametrize("seed", range(3))
def test_status_reduced_sample_load_gives_the_same_activity(seed: int, tmp_path: Path) -> None:
    path = tmp_path / "status.db"
    write_status_store(path, seed)
    store, reader = open_both(path)
    shown: set[tuple[str, bool]] = set()
    with reader:
        end = latest_moment(store)
        for moment in (end, end - timedelta(minutes=37), end - timedelta(minutes=80)):
            for lookback in LOOKBACKS:
                full = fresh_store(path).load_fleet_view(moment, lookback, moment - lookback)
                assert_same_status_views(reader, full, lookback)
                for threshold in STATUS_THRESHOLDS:
                    shown |= {
                        (activity.status, activity.idle_at_least)
                        for activity in (
                            gpu_activity(instance, moment, judged_at(threshold))
                            for instance in full.instances.values()
                        )
                    }
    assert {("busy", False), ("idle", False), ("idle", True), ("unknown", False)} <= shown


@pytest.mark.parametrize("seed", range(2))
def test_status_json_on_a_randomized_store_is_the_same_through_either_path(
    seed: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``status`` through sqlite3 loads only the samples it reads; the Store, the window."""
    path = tmp_path / "status.db"
    write_status_store(path, seed)
    isolate(monkeypatch, tmp_path)
    freeze_clock(monkeypatch, T0)
    through_sqlite3 = run(capsys, "status", "--db", str(path), "--json")
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_reader_module, "open_sqlite_reader", lambda path, shown: None)
        through_store = run(capsys, "status", "--db", str(path), "--json")
    assert through_sqlite3.code == through_store.code == 0
    assert through_sqlite3.out == through_store.out
    assert '"status": "idle"' in through_sqlite3.out


# -- which databases the sqlite3 path reads ------------------------------------------------------


def test_a_database_at_head_is_read_through_sqlite3_and_a_new_one_is_left_to_the_store(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    assert open_sqlite_reader(empty, str(empty)) is None  # never migrated: the Store migrates it
    at_head = tmp_path / "head.db"
    upgrade_to_head(create_engine_for(sqlite_url(at_head)))
    reader = open_sqlite_reader(at_head, str(at_head))
    assert reader is not None
    with reader:
        assert reader.latest_seen() is None  # no instance yet
    assert fresh_store(at_head).latest_seen() is None


def test_a_database_behind_head_is_left_to_the_store_and_one_ahead_is_refused(
    tmp_path: Path,
) -> None:
    history = shipped_history()
    assert history is not None
    database = tmp_path / "wd.db"
    upgrade_to_head(create_engine_for(sqlite_url(database)))
    older = sorted(history.revisions - {history.head})[0]
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (older,))
    assert open_sqlite_reader(database, "wd") is None
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    with pytest.raises(SchemaTooNewError):
        open_sqlite_reader(database, "wd")


def test_status_on_a_database_from_a_newer_version_exits_2_through_sqlite3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    isolate(monkeypatch, tmp_path)
    database = tmp_path / "wd.db"
    upgrade_to_head(create_engine_for(sqlite_url(database)))
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    result = run(capsys, "status", "--db", str(database))
    assert result.code == 2
    assert "newer watchdog-gpu" in result.err


def test_the_sqlite3_reader_never_writes(tmp_path: Path) -> None:
    database = tmp_path / "wd.db"
    upgrade_to_head(create_engine_for(sqlite_url(database)))
    reader = open_sqlite_reader(database, "wd")
    assert reader is not None
    with reader, pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.connection.execute("DELETE FROM accounts")
