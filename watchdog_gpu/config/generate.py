"""``config.example.toml`` and ``docs/configuration.md``, generated from the configuration's
models: each option's ``description``, default and ``examples``, each table's description (the
field holding it, or a rule's config model docstring), the rule tables from the rule registry.

``python -m watchdog_gpu.config.generate`` rewrites both files; ``--check`` exits 1 when either
differs from the models. ``watchdog-gpu config example`` prints the example.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from watchdog_gpu.config.sections import RulesConfig
from watchdog_gpu.config.settings import Settings
from watchdog_gpu.durations import format_duration
from watchdog_gpu.secrets import SecretReference

WIDTH = 99
REGENERATE = "python -m watchdog_gpu.config.generate"
EXAMPLE_PATH = Path("config.example.toml")
REFERENCE_PATH = Path("docs/configuration.md")

PREAMBLE = """\
watchdog-gpu configuration — every option, with its default, and what it does.
(Generated from the configuration's models by `python -m watchdog_gpu.config.generate`;
`watchdog-gpu config example` prints it. docs/configuration.md is the same as a reference.)

Copy this file to one of the places watchdog-gpu looks (first found wins):
  --config PATH, $WATCHDOG_GPU_CONFIG, ./watchdog-gpu.toml,
  $XDG_CONFIG_HOME/watchdog-gpu/config.toml (~/.config/...), /etc/watchdog-gpu/config.toml
and check it with:  watchdog-gpu config check --config PATH

Durations are written with a unit: "90s", "30m", "24h", "7d", "1h30m".
Any option can be overridden from the environment: WATCHDOG_GPU_<SECTION>__<OPTION>, for
example WATCHDOG_GPU_WATCHDOG__MODE=enforce or WATCHDOG_GPU_RULES__IDLE_GPU__IDLE=45m.
(Lists such as [[accounts]] can only be replaced whole, as JSON.)

Secrets (API keys, SSH keys, passphrases, notification URLs) are given by reference, exactly
one of:
  { credential = "name" }   a systemd credential: $CREDENTIALS_DIRECTORY/name, from a
                            LoadCredential=name:/etc/watchdog-gpu/credentials/name line of the
                            unit. Use this under the shipped system unit.
  { file = "/path" }        a file; a trailing newline is stripped; relative paths are taken
                            from this file's directory; ~ is expanded. The user unit's form
                            (files under ~/.config/watchdog-gpu/credentials/, mode 0600).
  { env = "NAME" }          an environment variable: for a shell, `once`, `notify test`.
A plain string works too, but then the secret sits in this file (config check warns).

Why the credential form under the system unit (systemd/watchdog-gpu.service): the service runs
as a throwaway user (DynamicUser=yes) with ProtectHome=yes, so "~/.ssh/id_ed25519" or any
file in a home directory does not exist for it, and /etc/watchdog-gpu/credentials/ is
root-only; and it gets no environment from your shell, so { env = ... } is empty unless you
put the secret in the unit (where `systemctl show` prints it to every user). LoadCredential=
copies each root-only file into a private directory only the service can read.

Lines of the form "# option = value" are options left at their default (which cannot be written
in TOML, usually "not set"); remove the "# " to set them."""


def tables() -> Iterator[tuple[str, type[BaseModel], str | None]]:
    """Every table of the configuration (dotted path, model, description), in file order; the
    entries of a list of tables as ``path[]``, the rule tables from the registry."""
    yield from _tables_of(Settings, "")


def _tables_of(
    model: type[BaseModel], path: str
) -> Iterator[tuple[str, type[BaseModel], str | None]]:
    for name, info in _options(model).items():
        where = f"{path}.{name}" if path else name
        kind, nested = _shape(info.annotation)
        if nested is None:
            continue
        description = info.description or _docstring(nested)
        if kind == "list":
            yield f"{where}[]", nested, description
            yield from _tables_of(nested, f"{where}[]")
        elif kind == "dict":
            yield f"{where}.<name>", nested, description
        else:
            yield where, nested, description
            yield from _tables_of(nested, where)


def _options(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The options of ``model``; under ``[rules]`` one per registered rule, described by its
    config model's docstring."""
    if issubclass(model, RulesConfig):
        return {
            name: FieldInfo(annotation=rule_model, description=_docstring(rule_model))
            for name, rule_model in RulesConfig.tables().items()
        }
    return dict(model.model_fields)


def _docstring(model: type[BaseModel]) -> str | None:
    """A rule config model's own docstring as one paragraph (its line breaks are the source's)."""
    doc = model.__dict__.get("__doc__")
    return " ".join(doc.split()) if isinstance(doc, str) else None


def _shape(annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """("model" | "list" | "dict" | "value", the table model if any) of an annotation."""
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return "model", member
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin is list and args and _is_model(args[0]):
            return "list", args[0]
        if origin is dict and len(args) == 2 and _is_model(args[1]):
            return "dict", args[1]
    return "value", None


def _members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _default(info: FieldInfo) -> Any:
    """The option's default, ``None`` when not set, ``PydanticUndefined`` when required."""
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def _example(info: FieldInfo) -> Any:
    return info.examples[0] if info.examples else None


# ---- TOML -------------------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """``value`` written as a TOML value (inline tables for tables)."""
    scalar = _toml_scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, BaseModel):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key(key)} = {toml_value(item)}" for key, item in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_scalar(value: Any) -> str | None:
    """``value`` as a TOML string, number, boolean or secret reference; None for a table or
    an array."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, timedelta):
        return json.dumps(format_duration(value))
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, SecretReference):
        return "{ " + f"{value.kind} = {json.dumps(value.name)}" + " }"
    return None


def _key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() else json.dumps(name)


def _comment(text: str | None, prefix: str = "# ") -> list[str]:
    """``text`` as comment lines: paragraphs wrapped, lines indented by two spaces kept."""
    if not text:
        return []
    lines: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            lines.append(prefix.rstrip())
        elif line.startswith("  "):
            lines.append(prefix + line)
        else:
            lines += textwrap.wrap(
                line,
                WIDTH,
                initial_indent=prefix,
                subsequent_indent=prefix,
                break_long_words=False,
                break_on_hyphens=False,
            )
    return lines


class _Example:
    """Writes the example file, describing each shared option (those every rule has) once."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.described: set[tuple[type, str]] = set()

    def table(
        self, header: str, model: type[BaseModel], values: Mapping[str, Any], *, full: bool
    ) -> None:
        """``header`` and the options of ``model``, then its nested tables. A table without
        options of its own (the whole file, ``[rules]``) gets no header line."""
        later: list[tuple[str, FieldInfo]] = []
        lines: list[str] = []
        self.lines, outer = lines, self.lines
        for name, info in _options(model).items():
            if self._own_table(name, info, values, full=full):
                later.append((name, info))
            elif full or name in values:
                self._option(name, info, model, values, describe=full)
        self.lines = outer
        if lines or header.startswith("[["):
            self.lines.append(header)
        self.lines += lines
        path = header.strip("[]")
        for name, info in later:
            self._nested(path, name, info, values, full=full)

    def _own_table(
        self, name: str, info: FieldInfo, values: Mapping[str, Any], *, full: bool
    ) -> bool:
        """Whether option ``name`` is written as a table of its own after the plain options: a
        nested model, list or dict, except a model whose options are all described already and
        that is not given (its default is written inline instead)."""
        kind, nested = _shape(info.annotation)
        if kind == "value" or nested is None:
            return False
        inline = kind == "model" and full and name not in values and self._all_described(nested)
        return not inline

    def _option(
        self,
        name: str,
        info: FieldInfo,
        owner: type[BaseModel],
        values: Mapping[str, Any],
        *,
        describe: bool = True,
    ) -> None:
        if describe:
            self._describe(owner, name, info)
        default = _default(info)
        if name in values:
            self.lines.append(f"{_key(name)} = {toml_value(values[name])}")
        elif default is not None and default is not PydanticUndefined:
            self.lines.append(f"{_key(name)} = {toml_value(default)}")
        elif info.examples:
            self.lines.append(f"# {_key(name)} = {toml_value(_example(info))}")

    def _describe(self, owner: type[BaseModel], name: str, info: FieldInfo) -> None:
        home = _defining_class(owner, name)
        if (home, name) in self.described:
            return
        self.described.add((home, name))
        self.lines += _comment(info.description)

    def _all_described(self, model: type[BaseModel]) -> bool:
        options = _options(model)
        return bool(options) and all(
            (_defining_class(model, name), name) in self.described for name in options
        )

    def _nested(
        self, path: str, name: str, info: FieldInfo, values: Mapping[str, Any], *, full: bool
    ) -> None:
        kind, nested = _shape(info.annotation)
        assert nested is not None
        where = f"{path}.{name}" if path else name
        writer = {"model": self._nested_model, "list": self._nested_list, "dict": self._nested_dict}
        writer[kind](where, info, nested, values.get(name), full=full)

    def _nested_model(
        self, where: str, info: FieldInfo, nested: type[BaseModel], given: Any, *, full: bool
    ) -> None:
        if not full and given is None:
            return
        self.lines.append("")
        if full:
            self.lines += _comment(info.description or _docstring(nested))
        self.table(f"[{where}]", nested, given or {}, full=full)

    def _nested_list(
        self, where: str, info: FieldInfo, nested: type[BaseModel], given: Any, *, full: bool
    ) -> None:
        """An array of tables: the given entries, else the field's example; only the first
        entry's options are described."""
        entries = given if given is not None else (_example(info) or [])
        self.lines.append("")
        self.lines += _comment(info.description)
        for index, entry in enumerate(entries):
            if index:
                self.lines.append("")
            self.table(f"[[{where}]]", nested, entry, full=full and index == 0)

    def _nested_dict(
        self, where: str, info: FieldInfo, nested: type[BaseModel], given: Any, *, full: bool
    ) -> None:
        """A table of named tables (per-account overrides): written commented out, as an
        example, in the full file only."""
        if not full:
            return
        example = given if given is not None else (_example(info) or {})
        self.lines.append("")
        self.lines += _comment(info.description)
        for key, entry in example.items():
            self.lines.append(f"# [{where}.{_key(key)}]")
            self.lines += [f"# {_key(k)} = {toml_value(v)}" for k, v in entry.items()]


def _defining_class(model: type[BaseModel], name: str) -> type:
    """The class whose own annotations declare ``name`` (shared options of every rule)."""
    for klass in model.__mro__:
        if name in inspect.get_annotations(klass):
            return klass
    return model


def example() -> str:
    """The text of ``config.example.toml``."""
    writer = _Example()
    writer.lines += _comment(PREAMBLE)
    writer.table("", Settings, {}, full=True)
    return _tidy(writer.lines)


def _tidy(lines: list[str]) -> str:
    text = "\n".join(lines).strip("\n") + "\n"
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


# ---- Markdown -----------------------------------------------------------------------------


def reference() -> str:
    """The text of ``docs/configuration.md``."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from the configuration's models by "
        f"`{REGENERATE}`: edit the models, not this file. -->",
        "",
        "Every option of the configuration file, with its default. "
        "[config.example.toml](../config.example.toml) is the same as a commented file to copy.",
        "",
        "```text",
        PREAMBLE,
        "```",
    ]
    first: dict[type[BaseModel], str] = {}
    for path, model, description in tables():
        name = _table_name(path)
        out += ["", f"## `[{name}]`", ""]
        if description:
            out += [_markdown_text(description), ""]
        if model in first and path.count(".") > 1:  # the salvage table of every rule
            out.append(f"The options of `[{first[model]}]`.")
            continue
        first.setdefault(model, name)
        rows = _rows(model)
        if rows:
            out += ["| Option | Default | Description |", "| --- | --- | --- |", *rows]
    return "\n".join(out).rstrip("\n") + "\n"


def _table_name(path: str) -> str:
    if path.endswith("[]"):
        return "[" + path[:-2].replace("[]", "") + "]"
    return path.replace("[]", "")


def _rows(model: type[BaseModel]) -> list[str]:
    rows = []
    for name, info in _options(model).items():
        kind, _ = _shape(info.annotation)
        if kind != "value":
            continue
        default = _default(info)
        if default is PydanticUndefined:
            shown = "required" + (f", e.g. `{toml_value(_example(info))}`" if info.examples else "")
        elif default is None:
            shown = "not set" + (f", e.g. `{toml_value(_example(info))}`" if info.examples else "")
        else:
            shown = f"`{toml_value(default)}`"
        text = _markdown_text(info.description or "").replace("\n", "<br>").replace("|", "\\|")
        rows.append(f"| `{name}` | {shown.replace('|', chr(92) + '|')} | {text} |")
    return rows


def _markdown_text(text: str) -> str:
    """A description as Markdown: indented lines (examples) kept as code lines."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("  "):
            out.append(f"`{line.strip()}`")
        else:
            # Outside code spans "<name>" would be read as an HTML tag.
            spans = line.split("`")
            spans[::2] = [span.replace("<", "&lt;").replace(">", "&gt;") for span in spans[::2]]
            out.append("`".join(spans))
    return "\n".join(out)


# ---- command ------------------------------------------------------------------------------


def outputs() -> dict[Path, str]:
    """Each generated file (relative to the repository) and its text."""
    return {EXAMPLE_PATH: example(), REFERENCE_PATH: reference()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in outputs().items():
        path = args.root / relative
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for relative in stale:
        verb = "differs from the models" if args.check else "written"
        print(f"{relative}: {verb}", file=sys.stderr)
    if args.check and stale:
        print(f"run `{REGENERATE}` to regenerate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
