"""config.example.toml and docs/configuration.md are generated from the models
(``watchdog_gpu/config/generate.py``): the checked-in files equal what the models give, the
example documents exactly the models' options and validates, and every example value an option
shows is valid for it.

Options whose default cannot be written in TOML (``None``: "not set") appear in the example as
commented-out lines ``# option = value`` (and ``# [table]`` headers); the option walk reads the
example with those lines switched on.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from watchdog_gpu.cli import main as main_cli
from watchdog_gpu.config import RulesConfig, Settings, load_settings
from watchdog_gpu.config.generate import REGENERATE, example, main, outputs, reference, tables
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.max_runtime import MaxRuntimeConfig

ROOT = Path(__file__).parent.parent.parent
EXAMPLE = ROOT / "config.example.toml"
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


def _options(model: type[BaseModel]) -> dict[str, Any]:
    """Option name → type; [rules] has one table per registered rule."""
    if issubclass(model, RulesConfig):
        return dict(RulesConfig.tables())
    return {name: field.annotation for name, field in model.model_fields.items()}


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
    options = _options(model)
    for name, annotation in options.items():
        where = f"{path}.{name}" if path else name
        if name not in table:
            found.append(f"missing from the example: {where}")
            continue
        value = table[name]
        nested, container = _model(annotation), _container(annotation)
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
        if key not in options:
            found.append(f"in the example but not in the models: {path}.{key}")
    return found


def test_the_checked_in_files_are_what_the_models_generate() -> None:
    for relative, text in outputs().items():
        current = (ROOT / relative).read_text(encoding="utf-8")
        assert current == text, f"{relative} differs from the models: run `{REGENERATE}`"


def test_the_check_names_the_command_that_regenerates_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--root", str(tmp_path)]) == 0  # writes both
    assert main(["--root", str(tmp_path), "--check"]) == 0
    example_file = tmp_path / "config.example.toml"
    example_file.write_text(example_file.read_text().replace("port = 9841", "port = 9842"))
    capsys.readouterr()

    assert main(["--root", str(tmp_path), "--check"]) == 1

    err = capsys.readouterr().err
    assert "config.example.toml: differs from the models" in err
    assert f"run `{REGENERATE}`" in err


def test_commented_options_are_recognised_and_prose_is_not() -> None:
    text = "# daily_usd = 50.0\n# [rules.budget.accounts.vast-main]\n# Per-account ceilings:\n"

    assert uncommented(text).splitlines() == [
        "daily_usd = 50.0",
        "[rules.budget.accounts.vast-main]",
        "# Per-account ceilings:",
    ]


def test_the_example_documents_exactly_the_options_of_the_models() -> None:
    full = tomllib.loads(uncommented(example()))

    assert differences(Settings, full, "") == []


def test_the_walk_notices_a_missing_and_an_extra_option() -> None:
    shipped = tomllib.loads(uncommented(example()))
    del shipped["probe"]["workers"]
    del shipped["rules"]["stuck_starting"]
    shipped["accounts"][0]["ssh"]["port"] = 22

    assert set(differences(Settings, shipped, "")) == {
        "missing from the example: probe.workers",
        "missing from the example: rules.stuck_starting",
        "in the example but not in the models: accounts[].ssh.port",
    }


def test_the_example_as_shipped_is_valid() -> None:
    settings = load_settings(EXAMPLE, {"HOME": "/nonexistent"})

    assert [account.name for account in settings.accounts] == ["vast-main", "runpod-lab"]
    assert settings.rules.of(MaxRuntimeConfig).limit is None  # commented out: off
    assert settings.rules.of(BudgetConfig).accounts == {}


def _required(model: type[BaseModel]) -> dict[str, Any]:
    return {
        name: field.examples[0]
        for name, field in model.model_fields.items()
        if field.is_required() and field.examples
    }


def test_every_example_an_option_shows_is_valid_for_it() -> None:
    checked = 0
    for _, model, _ in tables():
        if issubclass(model, RulesConfig):
            continue
        base = _required(model)
        for name, field in model.model_fields.items():
            for value in field.examples or []:
                container = _container(field.annotation)
                if container is None:
                    model.model_validate({**base, name: value})
                elif container[0] == "list":
                    for entry in value:
                        container[1].model_validate(entry)
                else:
                    for entry in value.values():
                        container[1].model_validate(entry)
                checked += 1
    assert checked >= 15, "examples of commented-out options (database_url, limit, ...)"


def test_the_commented_budget_accounts_and_time_limit_are_valid_when_switched_on(
    tmp_path: Path,
) -> None:
    text = example()
    start = text.index("[rules.budget]")
    end = text.index("[rules.idle_gpu]")
    limit = text.index("# limit = ")
    budget = uncommented(text[start:end]) + "\n"
    switched = text[:start] + budget + text[end:limit] + text[limit:].replace("# limit", "limit", 1)
    path = tmp_path / "config.toml"
    path.write_text(switched, encoding="utf-8")

    settings = load_settings(path, {"HOME": "/nonexistent"})

    assert settings.rules.of(BudgetConfig).accounts["vast-main"].daily_usd == 20.0
    assert settings.rules.of(BudgetConfig).daily_usd == 50.0
    assert settings.rules.of(MaxRuntimeConfig).limit is not None


def test_the_reference_has_a_section_per_table_and_a_row_per_option() -> None:
    text = reference()

    for path, _, _ in tables():
        name = path.replace("[]", "")
        heading = f"[[{name}]]" if path.endswith("[]") else f"[{name}]"
        assert f"## `{heading}`" in text, path
    assert '| `idle` | `"30m"` |' in text
    assert '| `limit` | not set, e.g. `"48h"` |' in text
    assert '| `api_key` | required, e.g. `{ credential = "vast_api_key" }` |' in text


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


def test_config_example_prints_a_file_config_check_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_cli(["config", "example"]) == 0
    printed = capsys.readouterr().out
    path = tmp_path / "config.toml"
    path.write_text(printed, encoding="utf-8")

    assert printed == EXAMPLE.read_text(encoding="utf-8")
    assert main_cli(["config", "check", "--config", str(path)]) == 0
