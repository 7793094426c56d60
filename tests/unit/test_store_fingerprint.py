"""An instance's fingerprint (``store/written_instances.py``), taken on every poll, made faster.

The digest must stay the one of ``json.dumps(values, default=_tagged)`` (instants tagged with
their ISO text, a value JSON cannot show: no fingerprint), and the values fingerprinted must
stay those a poll writes but for the listing's instants, in the same order.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from hashlib import blake2b
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.integration.store_builders import T0, instance
from watchdog_gpu.model import InstanceState
from watchdog_gpu.store.observations import LISTING_INSTANTS, listed_values, snapshot_values
from watchdog_gpu.store.written_instances import _tagged, fingerprint

offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
instants = st.datetimes(timezones=st.none() | offsets)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | instants
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


class Opaque:
    """A value JSON cannot show."""


def reference(account: str, instance_id: str, listed: list[Any]) -> bytes | None:
    """The fingerprint as it was first written: json.dumps with the tagging call back."""
    try:
        text = json.dumps([account, instance_id, *listed], default=_tagged)
    except (TypeError, ValueError):
        return None
    return blake2b(text.encode(), digest_size=16).digest()


@given(st.lists(values | st.just(Opaque()), max_size=6))
def test_the_fingerprint_is_the_digest_of_the_tagged_json_text(listed: list[Any]) -> None:
    assert fingerprint("vast-main", "101", listed) == reference("vast-main", "101", listed)


def test_values_of_another_type_or_instant_have_another_fingerprint() -> None:
    prints = {
        fingerprint("a", "1", [value])
        for value in (1, 1.0, True, "1", T0, T0.astimezone(timezone(timedelta(hours=9))))
    }
    assert len(prints) == 6
    assert fingerprint("a", "1", [Opaque()]) is None
    assert fingerprint("a", "1", [[Opaque()]]) is None


@given(
    state=st.sampled_from(list(InstanceState)),
    util=st.none() | st.lists(st.none() | st.floats(0, 100), max_size=3).map(tuple),
    ports=st.lists(st.integers(1, 65535), max_size=3).map(tuple),
    labels=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    started=st.none() | st.just(T0 - timedelta(hours=2)),
)
def test_the_listed_values_are_the_written_values_but_the_instants(
    state: InstanceState,
    util: tuple[float | None, ...] | None,
    ports: tuple[int, ...],
    labels: dict[str, str],
    started: datetime | None,
) -> None:
    snapshot = replace(
        instance("101", state),
        provider_gpu_util_percent=util,
        public_ports=ports,
        labels=labels,
        started_at=started,
    )
    written = snapshot_values(snapshot, T0 + timedelta(minutes=1))
    assert set(written) >= LISTING_INSTANTS
    expected = [value for name, value in written.items() if name not in LISTING_INSTANTS]
    assert listed_values(snapshot) == expected
    assert [type(value) for value in listed_values(snapshot)] == [type(v) for v in expected]
    assert fingerprint("a", "1", listed_values(snapshot)) == reference("a", "1", expected)


def test_an_aware_instant_subclass_is_tagged_as_before() -> None:
    class Moment(datetime):
        pass

    moment = Moment(2026, 3, 1, tzinfo=UTC)
    assert fingerprint("a", "1", [moment]) == reference("a", "1", [moment])
