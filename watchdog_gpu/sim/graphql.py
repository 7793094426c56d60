"""Just enough GraphQL for the RunPod dialect: parse one operation, validate it against a small
schema, and project resolved Python values onto its selection sets.

Supported: ``query``/``mutation`` operations (named or anonymous, the ``{ … }`` shorthand),
variable definitions and ``$variables``, arguments with object/list/string/number/boolean/null/
enum literals, aliases, ``__typename``, comments. Not supported (RunPod's clients do not send
them): fragments, directives, subscriptions, several operations in one document.

Validation mirrors a real server: an unknown field or a selection set on a scalar is an error
for the whole document (``GraphQLError``, which the dialect answers with HTTP 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r"""
    (?P<skip>[\s,\ufeff]+|\#[^\n]*)
  | (?P<spread>\.\.\.)
  | (?P<punct>[!$():=@\[\]{}|&])
  | (?P<number>-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<block>\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\")
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<name>[_A-Za-z][_0-9A-Za-z]*)
    """,
    re.VERBOSE,
)


class GraphQLError(Exception):
    """A syntax or validation error in the document."""


@dataclass(frozen=True, slots=True)
class Variable:
    name: str


@dataclass(frozen=True, slots=True)
class EnumValue:
    name: str


@dataclass(frozen=True, slots=True)
class Selection:
    name: str
    alias: str | None
    arguments: Mapping[str, Any]
    selections: tuple[Selection, ...] | None

    @property
    def key(self) -> str:
        return self.alias or self.name


@dataclass(frozen=True, slots=True)
class Operation:
    kind: str  # query | mutation
    name: str | None
    selections: tuple[Selection, ...]


@dataclass
class _Parser:
    tokens: list[tuple[str, str]]
    position: int = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, kind: str | None = None, value: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise GraphQLError("Syntax Error: Unexpected <EOF>.")
        if (kind is not None and token[0] != kind) or (value is not None and token[1] != value):
            expected = value or kind
            raise GraphQLError(f"Syntax Error: Expected {expected}, found {token[1]!r}.")
        self.position += 1
        return token[1]

    def accept(self, value: str) -> bool:
        token = self.peek()
        if token is not None and token[1] == value and token[0] in ("punct", "spread"):
            self.position += 1
            return True
        return False


def parse(document: str) -> Operation:
    """Parse a document holding exactly one operation; raises :class:`GraphQLError`."""
    parser = _Parser(_tokenise(document))
    operation = _operation(parser)
    if parser.peek() is not None:
        raise GraphQLError("only one operation per document is supported")
    return operation


def _tokenise(document: str) -> list[tuple[str, str]]:
    tokens = []
    position = 0
    while position < len(document):
        found = _TOKEN.match(document, position)
        if found is None:
            raise GraphQLError(f"Syntax Error: Unexpected character {document[position]!r}.")
        position = found.end()
        kind = found.lastgroup
        assert kind is not None
        if kind != "skip":
            tokens.append((kind, found.group()))
    return tokens


def _operation(parser: _Parser) -> Operation:
    token = parser.peek()
    if token is None:
        raise GraphQLError("Syntax Error: Unexpected <EOF>.")
    if token == ("punct", "{"):
        return Operation("query", None, _selection_set(parser))
    kind = parser.take("name")
    if kind not in ("query", "mutation"):
        raise GraphQLError(f"unsupported operation type {kind!r}")
    name = None
    if parser.peek() is not None and parser.peek()[0] == "name":  # type: ignore[index]
        name = parser.take("name")
    if parser.accept("("):
        while not parser.accept(")"):
            parser.take("punct", "$")
            parser.take("name")
            parser.take("punct", ":")
            _type(parser)
            if parser.accept("="):
                _value(parser)
    return Operation(kind, name, _selection_set(parser))


def _type(parser: _Parser) -> None:
    if parser.accept("["):
        _type(parser)
        parser.take("punct", "]")
    else:
        parser.take("name")
    parser.accept("!")


def _selection_set(parser: _Parser) -> tuple[Selection, ...]:
    parser.take("punct", "{")
    selections = []
    while not parser.accept("}"):
        if parser.peek() is not None and parser.peek()[0] == "spread":  # type: ignore[index]
            raise GraphQLError("fragments are not supported by this server")
        name = parser.take("name")
        alias = None
        if parser.accept(":"):
            alias, name = name, parser.take("name")
        arguments: dict[str, Any] = {}
        if parser.accept("("):
            while not parser.accept(")"):
                argument = parser.take("name")
                parser.take("punct", ":")
                arguments[argument] = _value(parser)
        nested = None
        token = parser.peek()
        if token == ("punct", "{"):
            nested = _selection_set(parser)
        selections.append(Selection(name, alias, arguments, nested))
    if not selections:
        raise GraphQLError("Syntax Error: a selection set cannot be empty.")
    return tuple(selections)


def _value(parser: _Parser) -> Any:
    token = parser.peek()
    if token is None:
        raise GraphQLError("Syntax Error: Unexpected <EOF>.")
    kind, text = token
    parser.take()
    if kind == "punct" and text in _COMPOUND_VALUES:
        return _COMPOUND_VALUES[text](parser)
    return _scalar_value(kind, text)


def _variable(parser: _Parser) -> Variable:
    return Variable(parser.take("name"))


def _list_value(parser: _Parser) -> list[Any]:
    items = []
    while not parser.accept("]"):
        items.append(_value(parser))
    return items


def _object_value(parser: _Parser) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    while not parser.accept("}"):
        key = parser.take("name")
        parser.take("punct", ":")
        fields[key] = _value(parser)
    return fields


# The values a punctuator opens, each read after it.
_COMPOUND_VALUES: Mapping[str, Callable[[_Parser], Any]] = {
    "$": _variable,
    "[": _list_value,
    "{": _object_value,
}


def _scalar_value(kind: str, text: str) -> Any:
    if kind == "number":
        return float(text) if any(char in text for char in ".eE") else int(text)
    if kind == "string":
        return _unescape(text[1:-1])
    if kind == "block":
        return text[3:-3].strip()
    if kind == "name":
        return {"true": True, "false": False, "null": None}.get(text, EnumValue(text))
    raise GraphQLError(f"Syntax Error: Unexpected {text!r}.")


def _unescape(text: str) -> str:
    simple = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
    result = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            if following == "u" and index + 5 < len(text):
                result.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            result.append(simple.get(following, following))
            index += 2
            continue
        result.append(char)
        index += 1
    return "".join(result)


def resolve_arguments(arguments: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
    """Arguments with ``$variables`` substituted and enums turned into their names."""

    def substitute(value: Any) -> Any:
        if isinstance(value, Variable):
            if value.name not in variables:
                raise GraphQLError(f'Variable "${value.name}" was not provided.')
            return variables[value.name]
        if isinstance(value, EnumValue):
            return value.name
        if isinstance(value, list):
            return [substitute(item) for item in value]
        if isinstance(value, dict):
            return {key: substitute(item) for key, item in value.items()}
        return value

    return {key: substitute(value) for key, value in arguments.items()}


@dataclass(frozen=True, slots=True)
class ObjectType:
    """A schema type: field name → the field's object type name, or None for a scalar."""

    name: str
    fields: Mapping[str, str | None] = field(default_factory=dict)


def validate(
    selections: tuple[Selection, ...], type_name: str, schema: Mapping[str, ObjectType]
) -> None:
    """Raise :class:`GraphQLError` for an unknown field or a selection/scalar mismatch."""
    object_type = schema[type_name]
    for selection in selections:
        if selection.name == "__typename":
            continue
        if selection.name not in object_type.fields:
            raise GraphQLError(
                f'Cannot query field "{selection.name}" on type "{object_type.name}".'
            )
        child = object_type.fields[selection.name]
        if child is None and selection.selections is not None:
            raise GraphQLError(
                f'Field "{selection.name}" must not have a selection since it is a scalar.'
            )
        if child is not None:
            if selection.selections is None:
                raise GraphQLError(
                    f'Field "{selection.name}" of type "{child}" must have a selection of '
                    "subfields."
                )
            validate(selection.selections, child, schema)


def project(
    value: Any,
    selections: tuple[Selection, ...] | None,
    type_name: str | None,
    schema: Mapping[str, ObjectType] | None = None,
) -> Any:
    """Keep only the selected fields of a resolved value (a dict, a list of dicts, a scalar).

    Field values that are callables are called first (lazy fields cost nothing unless asked
    for); ``schema`` gives nested values their type name for ``__typename``.
    """
    if value is None or selections is None:
        return value
    if isinstance(value, list):
        return [project(item, selections, type_name, schema) for item in value]
    fields = _field_types(schema, type_name)
    return {
        selection.key: _selected_value(value, selection, type_name, fields, schema)
        for selection in selections
    }


def _field_types(
    schema: Mapping[str, ObjectType] | None, type_name: str | None
) -> Mapping[str, str | None]:
    """The field types of ``type_name`` (empty when the schema does not know it)."""
    if schema is None or type_name is None:
        return {}
    known = schema.get(type_name)
    return known.fields if known is not None else {}


def _selected_value(
    value: Mapping[str, Any],
    selection: Selection,
    type_name: str | None,
    fields: Mapping[str, str | None],
    schema: Mapping[str, ObjectType] | None,
) -> Any:
    if selection.name == "__typename":
        return type_name
    item = value.get(selection.name)
    if callable(item):
        item = item()  # a lazy field, resolved only when selected
    return project(item, selection.selections, fields.get(selection.name), schema)


Resolver = Callable[[Mapping[str, Any]], Any]
