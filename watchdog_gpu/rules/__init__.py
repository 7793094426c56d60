"""The rules: one module each, registered by name in :mod:`watchdog_gpu.rules.registry`.

Adding a rule is one module (config model, a pure ``evaluate``,
``RULE = RuleSpec(NAME, Config, evaluate)``) plus its entry in ``registry.RULES``.

The registry's names are loaded on first use (PEP 562): the rules' configuration models are
pydantic models, ≈ 0.3 s of CPU to build, and a reader of one pure helper module
(``rules.windows``: what ``status`` shows) must not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from watchdog_gpu.rules.base import Rule, RuleConfig
    from watchdog_gpu.rules.registry import (
        RULES,
        Evaluation,
        cleared_reason,
        default_configs,
        evaluate_all,
        evaluate_rules,
        lookback_for,
        minimum_sample_lookback,
    )

__all__ = [
    "RULES",
    "Evaluation",
    "Rule",
    "RuleConfig",
    "cleared_reason",
    "default_configs",
    "evaluate_all",
    "evaluate_rules",
    "lookback_for",
    "minimum_sample_lookback",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("watchdog_gpu.rules.registry"), name)
    globals()[name] = value
    return value
