"""Benchmark: how the database grows, day by day, under the daemon's write path at 1,000
instances × 2 GPUs.

No providers and no rules, only what a tick writes, on a SQLite file with the real migrations:
every virtual minute a poll of every account (``record_observation``: instances, spans, one
account snapshot per account) and a probe round (``record_probes``: one outcome and one
condensed sample per GPU per instance, nine instances in ten busy), each phase in one
transaction as the engine writes them, and every virtual hour ``prune`` with the default
retention (7 days; samples older than a day rolled up). Reports the file's size (after a WAL
checkpoint) at the end of each virtual day and the largest tables.

Run from the repository root::

    .venv/bin/python -m bench.bench_growth [--days 2] [--accounts 50] [--per-account 20]

Not a test: nothing here asserts a size.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
    Verdict,
)
from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--per-account", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as scratch:
        path = Path(scratch) / "watchdog-gpu.db"
        print(grow(path, args.days, args.accounts, args.per_account))
    return 0


def grow(path: Path, days: float, accounts: int, per_account: int) -> str:
    engine = create_engine_for(sqlite_url(path))
    upgrade_to_head(engine)
    store = Store(engine)
    names = [f"vast-{number:02d}" for number in range(accounts)]
    started = time.perf_counter()
    rows = [
        "| virtual time | database | growth that day |",
        "|---|---|---|",
    ]
    minutes = int(days * 24 * 60)
    previous = 0.0
    for minute in range(1, minutes + 1):
        now = START + minute * MINUTE
        batch = getattr(store, "batch", None)  # absent before the one-commit-per-phase store
        with batch() if batch else nullcontext():
            for account in names:
                store.record_observation(_observation(account, per_account, now), now)
        with batch() if batch else nullcontext():
            store.record_probes(
                _probe(account, index, now) for account in names for index in range(per_account)
            )
        if minute % 60 == 0:
            store.prune(now)
        if minute % (24 * 60) == 0 or minute == minutes:
            size = _checkpointed_size(path)
            rows.append(
                f"| {timedelta(minutes=minute)} | {size:.1f} MiB | {size - previous:+.1f} MiB |"
            )
            print(rows[-1], flush=True)  # a long run shows its days as they end
            previous = size
    engine.dispose()
    tables = _largest(path)
    seconds = time.perf_counter() - started
    summary = (
        f"{accounts * per_account} instances × 2 GPUs in {accounts} accounts, one poll and one "
        f"probe round a minute, {days:g} virtual days ({seconds:.0f} s real):"
    )
    return "\n".join([summary, "", *rows, "", f"Largest tables and indexes (MiB): {tables}"])


def _observation(account: str, per_account: int, now: datetime) -> AccountObservation:
    return AccountObservation(
        account=AccountSnapshot(
            account=account,
            provider="vast",
            observed_at=now,
            balance_usd=1000.0,
            spend_usd_per_hour=per_account * 0.5,
        ),
        instances=tuple(
            InstanceSnapshot(
                account=account,
                instance_id=_instance_id(account, index),
                provider="vast",
                name=f"job-{index}",
                state=InstanceState.RUNNING,
                raw_state="running",
                observed_at=now,
                compute_usd_per_hour=0.5,
                storage_usd_per_hour=0.01,
                gpu_count=2,
                ssh_host="127.0.0.1",
                ssh_port=22000 + index,
            )
            for index in range(per_account)
        ),
    )


def _probe(account: str, index: int, now: datetime) -> ProbeOutcome:
    util = 0.0 if index % 10 == 9 else 90.0
    verdict = Verdict.IDLE if util == 0 else Verdict.BUSY
    instance_id = _instance_id(account, index)
    samples = tuple(
        GpuSample(
            account=account,
            instance_id=instance_id,
            at=now,
            gpu_index=gpu,
            verdict=verdict,
            source=SampleSource.DMON,
            sm=util,
            mem=util / 2,
            enc=0.0,
            dec=0.0,
        )
        for gpu in range(2)
    )
    detail = f"10 samples of 2 GPU(s); {verdict.value}: 0,1"
    return ProbeOutcome(
        account=account,
        instance_id=instance_id,
        at=now,
        status=ProbeStatus.OK,
        duration_seconds=10.4,
        detail=detail,
        samples=samples,
        interactive_login=False,
    )


def _instance_id(account: str, index: int) -> str:
    return f"{100_000 + int(account.rsplit('-', 1)[1]) * 1000 + index}"


def _checkpointed_size(path: Path) -> float:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size / 2**20


def _largest(path: Path) -> str:
    with sqlite3.connect(path) as connection:
        try:
            rows: list[Any] = connection.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"
            ).fetchall()
        except sqlite3.DatabaseError:
            return "(SQLite without dbstat)"
    return ", ".join(f"{name} {size / 2**20:.1f}" for name, size in rows)


if __name__ == "__main__":
    sys.exit(main())
