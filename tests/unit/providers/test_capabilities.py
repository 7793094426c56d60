"""Each adapter declares its provider's capabilities from the one table the config checks read."""

from __future__ import annotations

import pytest

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.providers import PROVIDERS


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_every_adapter_points_at_its_providers_capabilities(name: str) -> None:
    adapter = PROVIDERS[name]

    assert adapter.capabilities is CAPABILITIES[name]
    assert adapter.supports_stop is CAPABILITIES[name].can_stop


def test_only_lambda_cannot_stop_and_has_no_spot_or_balance() -> None:
    assert {name for name, caps in CAPABILITIES.items() if not caps.can_stop} == {"lambda"}
    assert CAPABILITIES["lambda"].interruptible is False
    assert CAPABILITIES["lambda"].balance is False
