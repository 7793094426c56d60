"""Result rows as named tuples, for the reads that convert every row of a large result.

The converters (``store.convert``) and the poll recorder read a row's columns by name. On a
SQLAlchemy ``Row`` each such read goes through its ``__getattr__``, about ten times slower than a
named tuple's field, and a tick reads about twenty columns of every instance three times (the poll,
the probe's list of running instances, the fleet view): copying a row's values into a named tuple of
the same column names once costs far less. Same values, same names. No database library here.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, Protocol


class Rows(Protocol):
    """A result: its column names and its rows of values in that order."""

    def keys(self) -> Iterable[str]: ...

    def __iter__(self) -> Any: ...


@cache
def record_type(columns: tuple[str, ...]) -> Callable[[Sequence[Any]], Any]:
    """A named tuple's constructor for a result's columns: the converters read by name."""
    row: Any = namedtuple("Row", columns)  # type: ignore[misc]
    make: Callable[[Sequence[Any]], Any] = row._make
    return make


def named(result: Rows) -> list[Any]:
    """``result``'s rows, each a named tuple of its columns."""
    make = record_type(tuple(result.keys()))
    return [make(row) for row in result]
