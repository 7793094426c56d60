"""Real-shaped provider rows for unit tests: fixture rows (tests/fixtures/providers) with
changes."""

from __future__ import annotations

import copy
from typing import Any

from tests.contract.provider_harness import fixture_json


def fixture_row(fixture: str, *path: str | int) -> dict[str, Any]:
    """A deep copy of the object at ``path`` in ``fixture``."""
    node: Any = fixture_json(fixture)
    for step in path:
        node = node[step]
    return dict(copy.deepcopy(node))


def vast_bid_row(**changes: Any) -> dict[str, Any]:
    """The outbid fixture's Vast bid row (bid 0.22 < min_bid 0.31, 64 GB disk billing
    $0.0142222/h, every status "stopped") with ``changes``."""
    row = fixture_row("vast/instances_outbid_paused.json", "instances", 0)
    row.update(changes)
    return row
