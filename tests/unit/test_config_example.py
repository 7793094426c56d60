"""config.example.toml documents every option of the models, and nothing else.

Options whose default cannot be written in TOML (``None``: "not set") appear in the example as
commented-out lines ``# option = value`` (and ``# [table]`` headers); the test reads the example
twice: as shipped, and with those lines uncommented. Both must validate; the uncommented one must
hold exactly the options of the models. Lists of tables (``[[accounts]]``) must cover every option
across their entries; dict-valued tables (``rules.budget.accounts``) by one example key.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from watchdog_gpu.config import Settings, load_settings

EXAMPLE = Path(__file__).parent.parent.parent / "config.example.toml"
_COMMENTED_OPTION = re.compile(r"^# ?([a-z_][a-z0-9_]* = .+|\[[A-Za-z0-9_.\-\[\]]+\])$")


def uncommented(text: str) -> str:
    """The example with its ``# option = value`` and ``# [table]`` lines switched on."""
    return "\n".join(
        match[1] if (match := _COMMENTED_OPTION.match(line)) else line for line in text.splitlines()
    )


def _members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _model(annotation: Any) -> type[BaseModel] | None:
    models = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    return models[0] if models else None


def _container(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("list", Model) for list[Model], ("dict", Model) for dict[str, Model]."""
    for member in _members(annotation):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin is list and args and _model(args[0]):
            return "list", args[0]
        if origin is dict and len(args) == 2 and _model(args[1]):
            return "dict", args[1]
    return None


def merge_into(target: dict[str, Any], source: dict[str, Any]) -> None:
    """Every key of ``source`` into ``target``, nested tables merged (entries cover each other)."""
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_into(target[key], value)
        else:
            target.setdefault(key, value)


def differences(model: type[BaseModel], table: dict[str, Any], path: str) -> list[str]:
    """Options of ``model`` missing from ``table`` and keys of ``table`` that are no option."""
    found = []
    for name, field in model.model_fields.items():
        where = f"{path}.{name}" if path else name
        if name not in table:
            found.append(f"missing from the example: {where}")
            continue
        value = table[name]
        nested, container = _model(field.annotation), _container(field.annotation)
        if container is not None:
            kind, item_model = container
            items = value if kind == "list" else list(value.values())
            if not items:
                found.append(f"no example entry for {where}")
            merged: dict[str, Any] = {}
            for item in items:
                merge_into(merged, item)
            found += differences(item_model, merged, f"{where}[]")
        elif nested is not None and isinstance(value, dict):
            found += differences(nested, value, where)
    for key in table:
        if key not in model.model_fields:
            found.append(f"in the example but not in the models: {path}.{key}")
    return found


def test_commented_options_are_recognised_and_prose_is_not() -> None:
    text = "# daily_usd = 50.0\n# [rules.budget.accounts.vast-main]\n# Per-account ceilings:\n"

    assert uncommented(text).splitlines() == [
        "daily_usd = 50.0",
        "[rules.budget.accounts.vast-main]",
        "# Per-account ceilings:",
    ]


def test_the_example_documents_exactly_the_options_of_the_models() -> None:
    full = tomllib.loads(uncommented(EXAMPLE.read_text(encoding="utf-8")))

    assert differences(Settings, full, "") == []


def test_the_example_with_every_commented_option_switched_on_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(uncommented(EXAMPLE.read_text(encoding="utf-8")), encoding="utf-8")

    settings = load_settings(path, {})

    assert settings.rules.budget.accounts["vast-main"].daily_usd == 20.0
    assert settings.rules.max_runtime.limit is not None


def test_the_walk_notices_a_missing_and_an_extra_option() -> None:
    shipped = tomllib.loads(uncommented(EXAMPLE.read_text(encoding="utf-8")))
    del shipped["probe"]["workers"]
    shipped["accounts"][0]["ssh"]["port"] = 22

    assert set(differences(Settings, shipped, "")) == {
        "missing from the example: probe.workers",
        "in the example but not in the models: accounts[].ssh.port",
    }


def test_the_environment_overrides_the_example_shows_apply_to_it() -> None:
    # The example's own WATCHDOG_GPU_<SECTION>__<OPTION> lines once named a deprecated key that
    # clashed with the file's `idle`, so following them made the file invalid.
    text = EXAMPLE.read_text()
    shown = re.findall(r"\b(WATCHDOG_GPU_[A-Z0-9_]+__[A-Z0-9_]+)=([^\s,.]+(?:\.\d+)?[a-z]*)", text)

    def option(settings: Settings, name: str) -> Any:
        node: Any = settings
        for part in name.removeprefix("WATCHDOG_GPU_").lower().split("__"):
            node = getattr(node, part)
        return node

    plain = load_settings(EXAMPLE, {"HOME": "/nonexistent"})
    assert len(shown) >= 2
    for name, value in shown:
        overridden = load_settings(EXAMPLE, {"HOME": "/nonexistent", name: value})
        assert option(overridden, name) != option(plain, name), name
