"""Benchmark: how the database grows, day by day, under the daemon's write path at 1,000
instances × 2 GPUs.

No providers and no rules, only what a tick writes with the default configuration (the
streaming probe), on a SQLite file with the real migrations: every virtual minute a poll of
every account (``record_observation``: instances, spans, one account snapshot per account; the
accounts are Vast.ai, RunPod and Lambda in turn, and RunPod's listing brings each running GPU's
utilisation, one ``provider_api`` sample per GPU, ``record_samples``) and a probe round
(``record_probes``: one outcome per instance, and per GPU the stream's condensed run of the
minute, ``covers_from`` set, as ``probe/condense.py`` makes it; nine instances in ten busy), each
phase in one transaction as the engine writes them, and every virtual hour ``prune`` with the
default retention (7 days; raw samples rolled up into hourly counts after ``RAW_SAMPLES_FOR``).
Reports the file's size (after a WAL checkpoint) every ``--every`` virtual hours and at the end
of each virtual day, and the largest tables.

Run from the repository root::

    .venv/bin/python -m bench.bench_growth [--days 2] [--accounts 50] [--per-account 20]
        [--every HOURS]

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
    parser.add_argument(
        "--every", type=float, default=24.0, help="virtual hours between size rows (default 24)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as scratch:
        path = Path(scratch) / "watchdog-gpu.db"
        print(grow(path, args.days, args.accounts, args.per_account, every=args.every))
    return 0


PROVIDERS = ("vast", "runpod", "lambda")


def grow(path: Path, days: float, accounts: int, per_account: int, *, every: float = 24.0) -> str:
    engine = create_engine_for(sqlite_url(path))
    upgrade_to_head(engine)
    store = Store(engine)
    names = [f"{PROVIDERS[number % 3]}-{number:02d}" for number in range(accounts)]
    started = time.perf_counter()
    rows = [
        "| virtual time | database | growth since the row before |",
        "|---|---|---|",
    ]
    every_minutes = max(1, round(every * 60))
    minutes = int(days * 24 * 60)
    previous = 0.0
    for minute in range(1, minutes + 1):
        now = START + minute * MINUTE
        batch = getattr(store, "batch", None)  # absent before the one-commit-per-phase store
        with batch() if batch else nullcontext():
            for account in names:
                store.record_observation(_observation(account, per_account, now), now)
                if account.startswith("runpod"):
                    store.record_samples(_provider_samples(account, per_account, now))
        with batch() if batch else nullcontext():
            store.record_probes(
                _probe(account, index, now) for account in names for index in range(per_account)
            )
        if minute % 60 == 0:
            store.prune(now)
        if minute % every_minutes == 0 or minute % (24 * 60) == 0 or minute == minutes:
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
    provider = account.rsplit("-", 1)[0]
    return AccountObservation(
        account=AccountSnapshot(
            account=account,
            provider=provider,
            observed_at=now,
            balance_usd=1000.0,
            spend_usd_per_hour=per_account * 0.5,
        ),
        instances=tuple(
            InstanceSnapshot(
                account=account,
                instance_id=_instance_id(account, index),
                provider=provider,
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


def _util(index: int) -> float:
    return 0.0 if index % 10 == 9 else 90.0


def _provider_samples(account: str, per_account: int, now: datetime) -> list[GpuSample]:
    """RunPod's listing: each running GPU's utilisation (``probe/prober.provider_api_samples``)."""
    return [
        GpuSample(
            account=account,
            instance_id=_instance_id(account, index),
            at=now,
            gpu_index=gpu,
            verdict=Verdict.IDLE if _util(index) == 0 else Verdict.BUSY,
            source=SampleSource.PROVIDER_API,
            sm=_util(index),
        )
        for index in range(per_account)
        for gpu in range(2)
    ]


# A stream's minute: rows a second apart from 59 s before the tick to 1 s before it, stamped
# at the host's seconds mapped to our clock (hence the microseconds).
_RUN_START = timedelta(seconds=59, microseconds=-417_233)
_RUN_END = timedelta(seconds=1, microseconds=-417_233)


def _probe(account: str, index: int, now: datetime) -> ProbeOutcome:
    """One instance's streamed minute as the stream buffer hands it over: one continuous
    sample per GPU (its run of one verdict, ``covers_from`` its first row), the metrics as the
    simulated ``dmon`` prints them (no video, no media), and the round's outcome."""
    util = _util(index)
    verdict = Verdict.IDLE if util == 0 else Verdict.BUSY
    instance_id = _instance_id(account, index)
    samples = tuple(
        GpuSample(
            account=account,
            instance_id=instance_id,
            at=now - _RUN_END,
            gpu_index=gpu,
            verdict=verdict,
            source=SampleSource.DMON,
            sm=util,
            mem=util * 0.6,
            enc=0.0,
            dec=0.0,
            jpg=0.0,
            ofa=0.0,
            covers_from=now - _RUN_START,
        )
        for gpu in range(2)
    )
    detail = "stream: 120 rows of 2 GPU(s) in 2 runs"
    return ProbeOutcome(
        account=account,
        instance_id=instance_id,
        at=now,
        status=ProbeStatus.OK,
        duration_seconds=60.0,
        detail=detail,
        samples=samples,
        interactive_login=False,
        mode="stream",
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
