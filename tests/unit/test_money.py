"""Money compared in cents: float dust never decides whether a limit is reached."""

from __future__ import annotations

import pytest

from watchdog_gpu.money import at_or_under, to_cents


@pytest.mark.parametrize(
    ("usd", "cents"),
    [
        (10.000000000000002, 1000),
        (9.999999999999998, 1000),
        (0.1 + 0.2, 30),
        (2.675, 268),
        (-0.004, 0),
        (-0.005, -1),
        (0.0, 0),
    ],
)
def test_amounts_round_to_the_cent_as_written(usd: float, cents: int) -> None:
    assert to_cents(usd) == cents


def test_a_balance_with_float_dust_above_the_floor_has_reached_it() -> None:
    assert at_or_under(10.000000000000002, 10.0)
    assert at_or_under(0.1 + 0.2, 0.3)
    assert not at_or_under(10.01, 10.0)
    assert at_or_under(float("-inf"), 10.0)
    assert not at_or_under(float("nan"), 10.0)
