"""``as_object``: a JSON object with string keys, whatever else (its keys' types checked in C)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from watchdog_gpu.providers.parsing.common import as_object


class Name(str):
    """A str subclass: a string key all the same."""


keys = st.one_of(st.text(max_size=3), st.integers(), st.none(), st.text(max_size=3).map(Name))


@given(st.dictionaries(keys, st.integers(), max_size=5))
def test_an_object_is_a_dict_whose_keys_are_all_strings(value: dict[object, int]) -> None:
    expected = value if all(isinstance(key, str) for key in value) else None
    assert as_object(value) is expected


def test_what_is_not_a_dict_is_not_an_object() -> None:
    assert as_object([("a", 1)]) is None
    assert as_object("a") is None
    assert as_object(None) is None
    assert as_object({}) == {}
