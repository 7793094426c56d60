"""An evaluation's findings recorded with statements (``store/findings.py``) against the ORM
unit of work the Store used before, kept here as the reference.

Whatever findings come (new episodes, known ones with new values, one episode twice in a call,
evidence of every JSON kind), the ``findings`` table must end up holding exactly what the ORM
wrote — every row, id and value as the driver returns them. On SQLite and, in the PostgreSQL
pass, PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tests.integration.store_builders import ACCOUNT, T0, minutes
from tests.support.databases import migrated_engines
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.store import Store
from watchdog_gpu.store.schema import FindingRow


def record_with_the_orm(engine: Engine, findings: list[Finding], now: datetime) -> None:
    """What ``Store.record_findings`` did before: a query and an ORM row per finding."""
    with Session(engine) as session, session.begin():
        for finding in findings:
            row = session.scalar(
                select(FindingRow).where(FindingRow.episode_key == finding.episode_key)
            )
            if row is None:
                row = FindingRow(episode_key=finding.episode_key, first_seen=now)
                session.add(row)
            row.rule = finding.rule
            row.account = finding.account
            row.instance_id = finding.instance_id
            row.severity = finding.severity.value
            row.action = finding.action.value
            row.summary = finding.summary
            row.episode_started_at = finding.episode_started_at
            row.due_at = finding.due_at
            row.evidence = dict(finding.evidence)
            row.usd_per_hour_at_stake = finding.usd_per_hour_at_stake
            row.last_seen = now


evidence_values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, 1.0, 31.25]), st.text()
)


@st.composite
def finding(draw: st.DrawFn) -> Finding:
    return Finding(
        rule=draw(st.sampled_from(["idle_gpu", "budget"])),
        account=ACCOUNT,
        instance_id=draw(st.sampled_from(["101", "102", None])),
        severity=draw(st.sampled_from(list(Severity))),
        action=draw(st.sampled_from([ActionKind.DESTROY, ActionKind.STOP])),
        summary=draw(st.sampled_from(["idle 10 min", "idle 20 min", "é ✓"])),
        episode_started_at=T0 + minutes(draw(st.integers(0, 2))),
        due_at=T0 + minutes(draw(st.integers(20, 40))),
        evidence=draw(st.dictionaries(st.sampled_from(["a", "b"]), evidence_values, max_size=2)),
        usd_per_hour_at_stake=draw(st.sampled_from([None, 0.52, 1])),
    )


def idle(evidence: dict[str, Any]) -> Finding:
    """An idle finding of instance 101 with ``evidence`` (one episode however often it comes)."""
    return Finding(
        rule="idle_gpu",
        account=ACCOUNT,
        instance_id="101",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary="idle 10 min",
        episode_started_at=T0,
        due_at=T0 + minutes(30),
        evidence=evidence,
        usd_per_hour_at_stake=0.52,
    )


def contents(engine: Engine) -> list[tuple[Any, ...]]:
    """Every row as the driver returns it, the evidence decoded: an update with an equal dict
    in another key order changes the stored text (the statements write it, the ORM's change
    tracking skips an equal value) but not the value anyone reads back."""
    with engine.connect() as connection:
        result = connection.exec_driver_sql("SELECT * FROM findings ORDER BY id")
        evidence = list(result.keys()).index("evidence")
        return [(*row[:evidence], _decoded(row[evidence]), *row[evidence + 1 :]) for row in result]


def _decoded(evidence: Any) -> Any:
    return json.loads(evidence) if isinstance(evidence, str) else evidence


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    with migrated_engines(tmp_path, "statements", "orm") as (first, second):
        yield first, second


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(evaluations=st.lists(st.lists(finding(), max_size=6), min_size=1, max_size=5))
# Found by Hypothesis: one episode's equal evidence in another key order at the next evaluation.
@example(evaluations=[[idle({"a": None, "b": 1})], [idle({"b": 1, "a": None})]])
def test_the_findings_table_holds_what_the_orm_wrote(
    engines: tuple[Engine, Engine], evaluations: list[list[Finding]]
) -> None:
    store = Store(engines[0])
    # Each example continues the same two databases, later in time.
    start = T0 + minutes(100 * len(contents(engines[0])))
    for number, findings in enumerate(evaluations):
        now = start + minutes(number)
        store.record_findings(findings, now)
        record_with_the_orm(engines[1], findings, now)

    assert contents(engines[0]) == contents(engines[1])
