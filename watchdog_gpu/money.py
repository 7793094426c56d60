"""Money compared as the providers bill it: in whole cents (pure).

Balances and prices arrive as binary floats, and arithmetic on them leaves dust
(``0.1 + 0.2 == 0.30000000000000004``): a balance of $10.00 read as 10.000000000000002 is not
"at or under" a $10 floor on raw floats, and the rule would act a poll later. Every comparison of
an amount with a configured limit goes through here, on amounts rounded to the cent.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

_CENT = Decimal("0.01")


def to_cents(usd: float) -> int:
    """``usd`` in whole cents, half a cent rounded away from zero (the shortest decimal text of
    the float is what is rounded: 2.675 is 268 cents, as written)."""
    return int((Decimal(repr(usd)) / _CENT).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def at_or_under(amount_usd: float, limit_usd: float) -> bool:
    """Whether ``amount_usd`` has reached ``limit_usd`` from above, to the cent."""
    if not (math.isfinite(amount_usd) and math.isfinite(limit_usd)):
        return amount_usd <= limit_usd  # no cents to round to (the parsers refuse these)
    return to_cents(amount_usd) <= to_cents(limit_usd)
