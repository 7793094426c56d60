"""Recording an evaluation's findings: one row per episode (a function over an open connection;
``Store.record_findings`` wraps it in one transaction).

Statements, not the ORM's unit of work: an evaluation records a finding for every instance a rule
speaks about, possibly hundreds a tick; one query per finding and the ORM's change tracking cost
more than the writes. The episodes already recorded are read once, then updated with one executemany
and the new ones inserted with another, in the order they came (so new rows get their ids as
before). The rows hold what the ORM wrote (``tests/integration/test_store_findings.py`` compares
them).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, insert, select, update

from watchdog_gpu.model import Finding
from watchdog_gpu.store.schema import FindingRow
from watchdog_gpu.store.spans import chunks

FINDINGS = cast(Table, FindingRow.__table__)
_EPISODES = select(FINDINGS.c.episode_key, FINDINGS.c.id).where(
    FINDINGS.c.episode_key.in_(bindparam("keys", expanding=True))
)
_UPDATE = update(FINDINGS).where(FINDINGS.c.id == bindparam("pk"))
_INSERT = insert(FINDINGS)


def record_findings(conn: Connection, findings: Iterable[Finding], now: datetime) -> None:
    """See ``Store.record_findings``. Two findings of one episode: the later one is recorded."""
    by_key: dict[str, Finding] = {}
    for finding in findings:
        by_key[finding.episode_key] = finding
    if not by_key:
        return
    recorded: dict[str, int] = {}
    for part in chunks(list(by_key)):
        recorded.update(conn.execute(_EPISODES, {"keys": list(part)}).all())
    updates: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for key, finding in by_key.items():
        values = _values(finding, now)
        pk = recorded.get(key)
        if pk is None:
            values.update(episode_key=key, first_seen=now)
            new.append(values)
        else:
            values["pk"] = pk
            updates.append(values)
    if updates:
        conn.execute(_UPDATE, updates)
    if new:
        conn.execute(_INSERT, new)


def _values(finding: Finding, now: datetime) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "account": finding.account,
        "instance_id": finding.instance_id,
        "severity": finding.severity.value,
        "action": finding.action.value,
        "summary": finding.summary,
        "episode_started_at": finding.episode_started_at,
        "due_at": finding.due_at,
        "evidence": dict(finding.evidence),
        "usd_per_hour_at_stake": finding.usd_per_hour_at_stake,
        "last_seen": now,
    }
