"""JSON columns decoded with repeated flat texts kept (``store/json_text.py``): the values of
``json.loads``, and never one list or dict handed to two readers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import JSON, column, select, table, text

from watchdog_gpu.store import json_text
from watchdog_gpu.store.engine import create_engine_for

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)


def same(first: Any, second: Any) -> bool:
    """Equal, with the same types all the way down (``1``, ``1.0`` and ``True`` differ)."""
    if type(first) is not type(second):
        return False
    if isinstance(first, list):
        return len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, dict):
        return list(first) == list(second) and all(same(first[k], second[k]) for k in first)
    return bool(first == second)


@given(values)
def test_every_read_is_what_json_loads_returns(value: Any) -> None:
    encoded = json.dumps(value)
    for _ in range(3):  # first read, then kept ones
        assert same(json_text.loads(encoded), json.loads(encoded))


def test_each_read_gets_its_own_list_and_dict() -> None:
    first = json_text.loads("[22, 8888]")
    first.append(1)
    assert json_text.loads("[22, 8888]") == [22, 8888]
    labels = json_text.loads('{"team": "a"}')
    labels["team"] = "b"
    assert json_text.loads('{"team": "a"}') == {"team": "a"}
    nested = json_text.loads('{"a": [1]}')
    nested["a"].append(2)
    assert json_text.loads('{"a": [1]}') == {"a": [1]}


def test_the_sqlite_engine_decodes_json_columns_with_it() -> None:
    engine = create_engine_for("sqlite://")
    assert engine.dialect._json_deserializer is json_text.loads
    with engine.connect() as conn:
        conn.execute(text("create table t (id integer primary key, v json)"))
        conn.execute(text("""insert into t (v) values ('[22, 8888]'), ('[22, 8888]')"""))
        rows = conn.execute(select(column("v", JSON())).select_from(table("t"))).scalars().all()
    assert rows == [[22, 8888], [22, 8888]]
    assert rows[0] is not rows[1]
