"""Recording what a poll or a probe saw (functions over an open session; the Store wraps each in
one transaction).

Statements, not ORM units of work: a poll touches every instance of an account each tick, so each
table is read once per poll (the rows the poll can change) and written with one executemany per
kind of change. The rows come out as the ORM wrote them before, in the same order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from watchdog_gpu.model import (
    AccountObservation,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
)
from watchdog_gpu.store.bulk import insert_rows, update_rows
from watchdog_gpu.store.inventory import record_ssh_keys, record_volumes
from watchdog_gpu.store.named_rows import named
from watchdog_gpu.store.outbox import changed_rows
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    GpuSampleRow,
    Instance,
    InstanceSpan,
    PinnedHostKey,
    ProbeOutcomeRow,
)
from watchdog_gpu.store.spans import (
    SpanWrites,
    chunks,
    current_span,
    same_rate,
    with_current_span,
)
from watchdog_gpu.store.written_instances import Fingerprint, WrittenInstances, fingerprint

logger = logging.getLogger(__name__)

# raw_state recorded for an instance that a complete listing no longer contains.
ABSENT_RAW_STATE = "(absent from listing)"
MAX_ERROR_MESSAGE_LENGTH = 500

ACCOUNTS = cast(Table, Account.__table__)
INSTANCES = cast(Table, Instance.__table__)
SPANS = cast(Table, InstanceSpan.__table__)
PROBES = cast(Table, ProbeOutcomeRow.__table__)
SAMPLES = cast(Table, GpuSampleRow.__table__)
SNAPSHOTS = cast(Table, AccountSnapshotRow.__table__)
GONE = InstanceState.GONE.value
Values = dict[str, Any]

# The statements are built once: building one and computing its cache key cost more than
# running it (SQLAlchemy caches the compiled SQL by that key).
_POLL_OK = update(ACCOUNTS).where(ACCOUNTS.c.name == bindparam("account_name"))
_LAST_LISTING = (
    select(ACCOUNTS.c.last_poll_ok_at)
    .where(ACCOUNTS.c.name == bindparam("account_name"))
    .with_for_update()
)
_BY_PK = INSTANCES.c.id == bindparam("pk")
_UPDATE_INSTANCES = update(INSTANCES).where(_BY_PK)
_INSERT_SNAPSHOTS = insert(SNAPSHOTS)
_INSERT_ACCOUNTS = insert(ACCOUNTS)
_INSERT_SPANS = insert(SPANS)
_INSERT_INSTANCES = insert(INSTANCES)
_DELETE_PROBE = delete(PROBES).where(PROBES.c.id == bindparam("pk"))
# Ids only grow (a run's new row is inserted before the old one goes), so the highest id of an
# instance is its latest run; the (account, instance_id, at) index covers the grouping.
# A run's probes agree on these, and on whether they brought samples at all: how many they
# brought changes every round on a GPU used in bursts (probe/condense.py), and a new row every
# round for a week of retention would be most of the database (docs/probe.md, "Bursty GPUs").
# The run's row keeps its latest probe's count.
_RUN_FIELDS = ("status", "detail", "interactive_login", "mode")
_LATEST_PROBES = select(
    PROBES.c.id,
    PROBES.c.account,
    PROBES.c.instance_id,
    PROBES.c.at,
    *(PROBES.c[name] for name in _RUN_FIELDS),
    PROBES.c.sample_count,
    PROBES.c.first_at,
    PROBES.c.repeats,
).where(
    PROBES.c.id.in_(
        select(func.max(PROBES.c.id))
        .where(PROBES.c.account.in_(bindparam("accounts", expanding=True)))
        .group_by(PROBES.c.account, PROBES.c.instance_id)
    )
)
_EXTEND_SPANS = update(SPANS).where(SPANS.c.id == bindparam("pk"))
_INSTANCE_COLUMNS = (
    INSTANCES.c.id,
    INSTANCES.c.instance_id,
    INSTANCES.c.state,
    INSTANCES.c.state_since,
    INSTANCES.c.compute_usd_per_hour,
    INSTANCES.c.storage_usd_per_hour,
)
_PRESENT = (INSTANCES.c.account == bindparam("account")) & (INSTANCES.c.state != GONE)
_WITH_SPAN = with_current_span(INSTANCES, _INSTANCE_COLUMNS, SPANS, "instance_pk")
_PRESENT_INSTANCES = _WITH_SPAN.where(_PRESENT).order_by(INSTANCES.c.instance_id)
_LISTED = (INSTANCES.c.account == bindparam("account")) & INSTANCES.c.instance_id.in_(
    bindparam("ids", expanding=True)
)
_LISTED_INSTANCES = _WITH_SPAN.where(_LISTED)
_LISTED_IDS = select(INSTANCES.c.instance_id, INSTANCES.c.id).where(_LISTED)
_FORGET_HOST_KEYS = delete(PinnedHostKey).where(
    PinnedHostKey.account == bindparam("account"),
    PinnedHostKey.instance_id.in_(bindparam("ids", expanding=True)),
)


def upsert_account(session: Session, name: str, provider: str, now: datetime) -> Account:
    """The account row for ``name``, created on first sight."""
    account = session.get(Account, name)
    if account is None:
        account = Account(name=name, provider=provider, first_seen=now)
        session.add(account)
        session.flush()
    elif account.provider != provider:
        account.provider = provider
    return account


def record_observation(
    conn: Connection,
    observation: AccountObservation,
    now: datetime,
    known: WrittenInstances | None = None,
) -> dict[int, Fingerprint | None]:
    """Record one complete poll of one account (see ``Store.record_observation``). ``known``:
    what the instance rows hold already (an instance found there unchanged gets only its
    listing's instants). Returns the instance rows written, by id, with their new fingerprints
    (None: none to keep), for ``known`` once the transaction committed."""
    snapshot = observation.account
    # The account's row is locked until the transaction ends, so two listings are recorded one
    # after the other.
    previous = conn.execute(_LAST_LISTING, {"account_name": snapshot.account}).scalar()
    if previous is not None and previous > now:
        # The executor's verification listing and a poll's are taken by different jobs: the
        # older one, recorded last, must not bring a destroyed instance back to life.
        logger.info("listing older than the recorded one skipped account=%s", snapshot.account)
        return {}
    _record_poll_ok(conn, snapshot.account, snapshot.provider, now)
    # A part listed in ``problems`` failed this poll: it is empty, not a complete listing, so
    # it must not mark anything gone (and an all-None account snapshot would hide the last
    # known balance).
    problems = observation.problems
    if "account" not in problems:
        conn.execute(
            _INSERT_SNAPSHOTS,
            {
                "account": snapshot.account,
                "provider": snapshot.provider,
                "observed_at": snapshot.observed_at,
                "balance_usd": snapshot.balance_usd,
                "spend_usd_per_hour": snapshot.spend_usd_per_hour,
                "spend_limit_usd_per_hour": snapshot.spend_limit_usd_per_hour,
                "autopay_enabled": snapshot.autopay_enabled,
            },
        )
    changes = _Changes(known, listed_before=previous)
    written = _record_instances(conn, snapshot.account, observation.instances, now, changes)
    if "volumes" not in problems:
        record_volumes(conn, snapshot.account, observation.volumes, now)
    if "ssh_keys" not in problems:
        record_ssh_keys(conn, observation, now)
    return written


def _record_poll_ok(conn: Connection, name: str, provider: str, now: datetime) -> None:
    values: Values = {
        "provider": provider,
        "last_poll_ok_at": now,
        "last_poll_error_kind": None,
        "last_poll_error_at": None,
        "last_poll_error_message": None,
    }
    updated = conn.execute(_POLL_OK, {"account_name": name, **values})
    if changed_rows(updated) == 0:
        conn.execute(_INSERT_ACCOUNTS, {"name": name, "first_seen": now, **values})


def record_poll_failure(
    session: Session, account: str, provider: str, *, error_kind: str, message: str, now: datetime
) -> None:
    """Remember that polling ``account`` failed; what was recorded before stays as it was."""
    row = upsert_account(session, account, provider, now)
    row.last_poll_error_kind = error_kind
    row.last_poll_error_at = now
    row.last_poll_error_message = message[:MAX_ERROR_MESSAGE_LENGTH]


def record_probes(conn: Connection, outcomes: Iterable[ProbeOutcome]) -> None:
    """The probe outcomes and their samples. An outcome identical to its instance's latest
    recorded one (status, detail, interactive login, sample count) extends that run instead of
    adding a row: the run's row is replaced by one with the new ``at`` and one more repeat,
    inserted before the old one is deleted so it gets a higher id (see store/history.py)."""
    outcomes = list(outcomes)
    runs = _latest_runs(conn, {outcome.account for outcome in outcomes})
    pending: dict[tuple[str, str], Values] = {}
    rows: list[Values] = []
    superseded: set[int] = set()  # ids (id()) of rows of this batch extended by a later one
    replaced: list[Values] = []
    samples: list[GpuSample] = []
    for outcome in outcomes:
        key = (outcome.account, outcome.instance_id)
        row = _probe_values(outcome)
        previous = pending.get(key) or runs.get(key)
        if previous is not None and _same_run(previous, row):
            row["first_at"] = previous["first_at"]
            row["repeats"] = previous["repeats"] + 1
            if key in pending:
                superseded.add(id(previous))  # never written: only the extended run goes in
            else:
                replaced.append({"pk": runs.pop(key)["id"]})
        rows.append(row)
        pending[key] = row
        samples.extend(outcome.samples)
    rows = [row for row in rows if id(row) not in superseded]
    insert_rows(conn, PROBES, rows)
    if replaced:
        conn.execute(_DELETE_PROBE, replaced)
    record_samples(conn, samples)


def _probe_values(outcome: ProbeOutcome) -> Values:
    return {
        "account": outcome.account,
        "instance_id": outcome.instance_id,
        "at": outcome.at,
        "status": outcome.status.value,
        "duration_seconds": outcome.duration_seconds,
        "detail": outcome.detail,
        "sample_count": len(outcome.samples),
        "interactive_login": outcome.interactive_login,
        "mode": outcome.mode,
        "first_at": outcome.at,
        "repeats": 1,
    }


def _same_run(previous: Values, row: Values) -> bool:
    return (
        previous["at"] <= row["at"]
        and all(previous[name] == row[name] for name in _RUN_FIELDS)
        and (previous["sample_count"] > 0) == (row["sample_count"] > 0)
    )


def _latest_runs(conn: Connection, accounts: set[str]) -> dict[tuple[str, str], Values]:
    """Each instance's newest probe row (of ``accounts``), by (account, instance id)."""
    latest: dict[tuple[str, str], Values] = {}
    for part in chunks(sorted(accounts)):
        result = conn.execute(_LATEST_PROBES, {"accounts": list(part)})
        # Each row's values by name, zipped with the keys read once (a Row's ``_mapping`` and
        # its attributes cost a few µs a row, for every instance probed each round).
        keys = tuple(result.keys())
        for values in (dict(zip(keys, row, strict=True)) for row in result):
            latest[(values["account"], values["instance_id"])] = values
    return latest


def record_samples(conn: Connection, samples: Iterable[GpuSample]) -> None:
    rows = [
        {
            "account": sample.account,
            "instance_id": sample.instance_id,
            "at": sample.at,
            "gpu_index": sample.gpu_index,
            "verdict": sample.verdict.value,
            "source": sample.source.value,
            "sm": sample.sm,
            "mem": sample.mem,
            "enc": sample.enc,
            "dec": sample.dec,
            "jpg": sample.jpg,
            "ofa": sample.ofa,
            "covers_from": sample.covers_from,
        }
        for sample in samples
    ]
    insert_rows(conn, SAMPLES, rows)


def _unique_by_id(
    account: str, snapshots: Iterable[InstanceSnapshot]
) -> dict[str, InstanceSnapshot]:
    by_id: dict[str, InstanceSnapshot] = {}
    for snapshot in snapshots:
        if snapshot.account != account:
            raise ValueError(
                f"instance {snapshot.instance_id} belongs to account {snapshot.account!r}, "
                f"not {account!r}"
            )
        if snapshot.instance_id in by_id:
            # A provider listing an id twice is a provider bug; the later entry wins.
            logger.warning(
                "duplicate instance in listing account=%s instance=%s",
                account,
                snapshot.instance_id,
            )
        by_id[snapshot.instance_id] = snapshot
    return by_id


def _existing_instances(conn: Connection, account: str, listed: Sequence[str]) -> dict[str, Any]:
    """The account's instance rows a poll can change, each with its current span — every one
    not gone, plus gone ones listed again (an account's gone instances pile up and never change
    again) — by instance id."""
    # Named tuples (store/named_rows.py): each row's columns are read a few times per poll.
    present = named(conn.execute(_PRESENT_INSTANCES, {"account": account}))
    rows = {row.instance_id: row for row in present}
    unknown = [instance_id for instance_id in listed if instance_id not in rows]
    for part in chunks(unknown):
        params = {"account": account, "ids": list(part)}
        rows.update(
            (row.instance_id, row) for row in named(conn.execute(_LISTED_INSTANCES, params))
        )
    return rows


def _record_instances(
    conn: Connection,
    account: str,
    snapshots: Iterable[InstanceSnapshot],
    now: datetime,
    changes: _Changes,
) -> dict[int, Fingerprint | None]:
    listed = _unique_by_id(account, snapshots)
    existing = _existing_instances(conn, account, list(listed))
    for instance_id, snapshot in listed.items():
        row = existing.get(instance_id)
        if row is None:
            changes.new.append(snapshot)
        else:
            changes.observe(row, snapshot, now)
    absent = [
        row
        for instance_id, row in existing.items()
        if instance_id not in listed and row.state != GONE
    ]
    _gone(account, absent, changes, now)
    _write_instances(conn, account, changes, now)
    return changes.written


def _write_instances(
    conn: Connection,
    account: str,
    changes: _Changes,
    now: datetime,
) -> None:
    """Execute a poll's instance writes in bulk (first-seen instances' fingerprints go into
    ``changes.written``)."""
    if changes.seen:
        update_rows(conn, _UPDATE_INSTANCES, changes.seen)
    for rows in (changes.updates, changes.gone):
        if rows:
            conn.execute(_UPDATE_INSTANCES, rows)
    if changes.spans.extended:
        update_rows(conn, _EXTEND_SPANS, changes.spans.extended)
    if changes.forget:
        _forget_host_keys(conn, account, changes.forget)
    if changes.new:
        changes.spans.opened.extend(_insert_instances(conn, account, changes, now))
    if changes.spans.opened:
        conn.execute(_INSERT_SPANS, changes.spans.opened)


@dataclass
class _Changes:
    """The writes a poll's listing calls for, gathered to be executed in bulk."""

    known: WrittenInstances | None = None
    # The account's previous complete listing (None: none recorded): no first sighting of this
    # listing billed before it.
    listed_before: datetime | None = None
    spans: SpanWrites = field(default_factory=SpanWrites)
    updates: list[Values] = field(default_factory=list)  # whole rows
    seen: list[Values] = field(default_factory=list)  # rows unchanged but for the instants
    gone: list[Values] = field(default_factory=list)  # rows absent from the listing
    new: list[InstanceSnapshot] = field(default_factory=list)  # first seen: to insert
    forget: list[str] = field(default_factory=list)
    written: dict[int, Fingerprint | None] = field(default_factory=dict)

    def observe(self, row: Any, snapshot: InstanceSnapshot, now: datetime) -> None:
        """A listed instance recorded before (a ``with_current_span`` row): extend its current
        span or open a new one. The span's columns are read off the row directly (no
        ``CurrentSpan``): every listed instance passes here on every poll."""
        state = snapshot.state.value
        if _continues_span(row, state, snapshot):
            self.spans.extend(row.span_id, row.span_last_seen, now)
        else:
            self.spans.opened.append(_span(row.id, state, snapshot.raw_state, snapshot, now))
        state_changed = row.state != state
        if state_changed and snapshot.state is InstanceState.GONE:
            self.forget.append(snapshot.instance_id)
        if self.known is None:
            print_ = None
        else:
            # The fingerprint first: an unchanged instance (most of them) needs no values dict.
            print_ = _fingerprint(snapshot)
            if not state_changed and self.known.holds(row.id, print_):
                self.seen.append(
                    {"pk": row.id, "observed_at": snapshot.observed_at, "last_seen": now}
                )
                return
        values = snapshot_values(snapshot, now)
        values["pk"] = row.id
        values["state_since"] = now if state_changed else row.state_since
        self.updates.append(values)
        self.written[row.id] = None if snapshot.state is InstanceState.GONE else print_


def _continues_span(row: Any, state: str, snapshot: InstanceSnapshot) -> bool:
    """Whether the listing continues the row's current span: same state, same rates."""
    return (
        row.span_id is not None
        and row.span_state == state
        and same_rate(row.span_compute_usd_per_hour, snapshot.compute_usd_per_hour)
        and same_rate(row.span_storage_usd_per_hour, snapshot.storage_usd_per_hour)
    )


def _gone(account: str, absent: list[Any], changes: _Changes, now: datetime) -> None:
    """The instances a complete listing no longer has become gone: their rows' updates, gone
    spans and forgotten host keys join ``changes``."""
    for row in absent:
        logger.info("instance absent from listing account=%s instance=%s", account, row.instance_id)
        changes.gone.append(_absent(row, current_span(row), changes.spans.opened, now))
        changes.forget.append(row.instance_id)
        changes.written[row.id] = None


def _absent(row: Any, span: Any, new_spans: list[Values], now: datetime) -> Values:
    """A complete listing no longer has the instance: it is gone (it bills nothing any more).
    Adds its gone span to ``new_spans``; returns the instance row's update."""
    source = span if span is not None else row
    new_spans.append(
        {
            "instance_pk": row.id,
            "state": GONE,
            "raw_state": ABSENT_RAW_STATE,
            "compute_usd_per_hour": source.compute_usd_per_hour,
            "storage_usd_per_hour": source.storage_usd_per_hour,
            "first_seen": now,
            "last_seen": now,
        }
    )
    return {
        "pk": row.id,
        "state": GONE,
        "raw_state": ABSENT_RAW_STATE,
        "observed_at": now,
        "last_seen": now,
        "state_since": now,
    }


def _insert_instances(
    conn: Connection, account: str, changes: _Changes, now: datetime
) -> list[Values]:
    """Insert the first-seen instances of ``changes`` (their fingerprints into its
    ``written``), anchored no earlier than its ``listed_before``; returns their first spans."""
    snapshots, written = changes.new, changes.written
    rows = []
    prints: list[Fingerprint | None] = []
    for snapshot in snapshots:
        values = snapshot_values(snapshot, now)
        gone = snapshot.state is InstanceState.GONE
        prints.append(None if gone else _fingerprint(snapshot))
        values.update(account=account, instance_id=snapshot.instance_id, first_seen=now)
        values["state_since"] = now
        values["billed_from"] = billed_from(snapshot, now, changes.listed_before)
        rows.append(values)
    conn.execute(_INSERT_INSTANCES, rows)
    ids: dict[str, int] = {}
    for part in chunks([snapshot.instance_id for snapshot in snapshots]):
        ids.update(conn.execute(_LISTED_IDS, {"account": account, "ids": list(part)}).all())
    for snapshot, print_ in zip(snapshots, prints, strict=True):
        written[ids[snapshot.instance_id]] = print_
    return [_span(ids[s.instance_id], s.state.value, s.raw_state, s, now) for s in snapshots]


def billed_from(
    snapshot: InstanceSnapshot, now: datetime, listed_before: datetime | None = None
) -> datetime | None:
    """The ledger's anchor of an instance first seen ``now``: when its compute began to bill,
    if the provider dates it before this sighting — the start time of a running instance, the
    rented instant of a starting one whose compute bills (a RunPod pod not up yet) — else None.
    Never earlier than ``listed_before``, the account's previous complete listing: an instance
    absent from it was not billing then. Written once, with the instance row, and never
    recomputed (docs/safety.md, "Period spend").

    A rented instant needs that previous listing: on the watchdog's first look at an account,
    a pod resumed after a stop may still carry its first rent's date, days back, and billing
    those days at the starting rate could cross a budget ceiling nobody reached (an emergency
    destroy on a guess). Then the bill starts at the sighting, as for a provider that dates
    nothing."""
    if snapshot.state is InstanceState.RUNNING:
        began = snapshot.started_at
    elif (
        snapshot.state is InstanceState.STARTING
        and snapshot.compute_usd_per_hour != 0
        and listed_before is not None
    ):
        began = snapshot.rented_at
    else:
        return None
    if began is not None and listed_before is not None:
        began = max(began, listed_before)
    return began if began is not None and began < now else None


def _span(pk: int, state: str, raw_state: str, snapshot: InstanceSnapshot, now: datetime) -> Values:
    return {
        "instance_pk": pk,
        "state": state,
        "raw_state": raw_state,
        "compute_usd_per_hour": snapshot.compute_usd_per_hour,
        "storage_usd_per_hour": snapshot.storage_usd_per_hour,
        "first_seen": now,
        "last_seen": now,
    }


# What a listing writes that changes with every poll: the rest of ``snapshot_values`` is the
# instance's fingerprint (store/written_instances.py), :func:`listed_values`.
LISTING_INSTANTS = frozenset({"observed_at", "last_seen"})


def _fingerprint(snapshot: InstanceSnapshot) -> Fingerprint | None:
    return fingerprint(snapshot.account, snapshot.instance_id, listed_values(snapshot))


def listed_values(snapshot: InstanceSnapshot) -> list[Any]:
    """The values of :func:`snapshot_values` but the listing's instants, in its order (built
    without the dict: the fingerprint of every listed instance is taken on every poll; a test
    holds the two in step)."""
    util = snapshot.provider_gpu_util_percent
    return [
        snapshot.provider,
        snapshot.name,
        snapshot.state.value,
        snapshot.raw_state,
        snapshot.interruptible,
        snapshot.compute_usd_per_hour,
        snapshot.storage_usd_per_hour,
        snapshot.disk_gb,
        snapshot.gpu_name,
        snapshot.gpu_count,
        snapshot.ssh_host,
        snapshot.ssh_port,
        snapshot.ssh_user,
        snapshot.created_at,
        snapshot.started_at,
        None if util is None else list(util),
        list(snapshot.public_ports),
        dict(snapshot.labels),
    ]


def snapshot_values(snapshot: InstanceSnapshot, now: datetime) -> Values:
    util = snapshot.provider_gpu_util_percent
    return {
        "provider": snapshot.provider,
        "name": snapshot.name,
        "state": snapshot.state.value,
        "raw_state": snapshot.raw_state,
        "observed_at": snapshot.observed_at,
        "interruptible": snapshot.interruptible,
        "compute_usd_per_hour": snapshot.compute_usd_per_hour,
        "storage_usd_per_hour": snapshot.storage_usd_per_hour,
        "disk_gb": snapshot.disk_gb,
        "gpu_name": snapshot.gpu_name,
        "gpu_count": snapshot.gpu_count,
        "ssh_host": snapshot.ssh_host,
        "ssh_port": snapshot.ssh_port,
        "ssh_user": snapshot.ssh_user,
        "created_at": snapshot.created_at,
        "started_at": snapshot.started_at,
        "provider_gpu_util_percent": None if util is None else list(util),
        "public_ports": list(snapshot.public_ports),
        "labels": dict(snapshot.labels),
        "last_seen": now,
    }


def _forget_host_keys(conn: Connection, account: str, instance_ids: list[str]) -> None:
    # A gone instance's id is never reused; its pinned key is only clutter now.
    for part in chunks(instance_ids):
        conn.execute(_FORGET_HOST_KEYS, {"account": account, "ids": list(part)})
