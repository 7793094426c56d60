"""The executor carries out what the core decided: it names no rule and imports none.

import-linter holds the imports (pyproject: "The executor carries out what it is told"); this
test holds the names: no string or identifier in ``executor.py`` or ``action_steps.py`` (how it
records its steps) is a registered rule's name or a set of them, so a rule-specific decision
cannot hide there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import watchdog_gpu.action_steps
import watchdog_gpu.executor
from watchdog_gpu.call_policy import CallPolicy
from watchdog_gpu.model import ActionKind
from watchdog_gpu.rules.base import SalvageConfig
from watchdog_gpu.rules.registry import RULES

SOURCE = Path(watchdog_gpu.executor.__file__).read_text(encoding="utf-8")
STEPS = Path(watchdog_gpu.action_steps.__file__).read_text(encoding="utf-8")


def _words(tree: ast.AST) -> set[str]:
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words.update(re.findall(r"[A-Za-z_]+", node.value))
        elif isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
    return words


def test_the_executor_names_no_rule() -> None:
    words = _words(ast.parse(SOURCE)) | _words(ast.parse(STEPS))
    assert not words & set(RULES), sorted(words & set(RULES))
    assert not {word for word in words if word.endswith("_RULES")}


def test_the_words_check_sees_a_rule_name_in_the_executor() -> None:
    # What the executor held before the call policy: the check above would fail on it.
    planted = SOURCE + '\nHOLD = frozenset({"max_runtime", "stopped_disk"})\n'
    assert _words(ast.parse(planted)) & set(RULES) == {"max_runtime", "stopped_disk"}


def test_the_orders_come_from_the_rules_configuration() -> None:
    hold = SalvageConfig(command=["rsync", "{ssh_host}:/out", "."])
    anyway = SalvageConfig(command=["true"], on_failure="destroy")
    policy = CallPolicy({"idle_gpu": hold, "max_runtime": anyway})

    idle = policy.orders("idle_gpu", ActionKind.DESTROY)
    assert idle.salvage is hold
    assert not idle.destroy_if_salvage_fails
    assert not idle.hold_on_unreadable_listing  # judged by its own evidence
    limit = policy.orders("max_runtime", ActionKind.DESTROY)
    assert limit.hold_on_unreadable_listing
    assert limit.destroy_if_salvage_fails
    assert policy.orders("idle_gpu", ActionKind.STOP).salvage is None  # salvage: destroys only
    assert policy.orders("budget", ActionKind.DESTROY) == policy.orders("budget", ActionKind.STOP)
