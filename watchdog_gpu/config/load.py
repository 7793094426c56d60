"""Finding and loading the configuration file; every problem reported by its dotted path."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from watchdog_gpu.config.sections import RulesConfig
from watchdog_gpu.config.settings import (
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    LoadContext,
    Settings,
    current_load,
)
from watchdog_gpu.errors import TOML_TOO_DEEP, ConfigError, ConfigProblem
from watchdog_gpu.secrets import config_directory

CONFIG_ENV_VAR = "WATCHDOG_GPU_CONFIG"
LOCAL_CONFIG_NAME = "watchdog-gpu.toml"
SYSTEM_CONFIG_FILE = Path("/etc/watchdog-gpu/config.toml")


@dataclass(frozen=True, slots=True)
class ConfigLocation:
    """The config file to load and how it was found (``--config``, ``$WATCHDOG_GPU_CONFIG``,
    ``current directory``, ``user config``, ``system config``)."""

    path: Path
    origin: str


def config_search_path(
    environ: Mapping[str, str], *, cwd: Path | None = None, system_file: Path = SYSTEM_CONFIG_FILE
) -> list[ConfigLocation]:
    """The places looked at, in order, when neither ``--config`` nor $WATCHDOG_GPU_CONFIG names a
    file: ``./watchdog-gpu.toml``, ``$XDG_CONFIG_HOME/watchdog-gpu/config.toml`` (default
    ``~/.config``), ``/etc/watchdog-gpu/config.toml``."""
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if not (xdg and Path(xdg).is_absolute()):
        home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
        xdg = str(home / ".config")
    return [
        ConfigLocation((cwd or Path.cwd()) / LOCAL_CONFIG_NAME, "current directory"),
        ConfigLocation(Path(xdg) / "watchdog-gpu" / "config.toml", "user config"),
        ConfigLocation(system_file, "system config"),
    ]


def find_config_file(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
    system_file: Path = SYSTEM_CONFIG_FILE,
) -> ConfigLocation:
    """The config file to use: ``path`` (``--config``), else ``$WATCHDOG_GPU_CONFIG``, else the
    first existing file of :func:`config_search_path`. A file named explicitly must exist.
    Raises ``ConfigError`` when the named file is missing or nothing is found anywhere."""
    env = os.environ if environ is None else environ
    named = (
        ConfigLocation(path, "--config")
        if path is not None
        else ConfigLocation(Path(env[CONFIG_ENV_VAR]), f"${CONFIG_ENV_VAR}")
        if env.get(CONFIG_ENV_VAR)
        else None
    )
    if named is not None:
        absolute = named.path.expanduser().absolute()
        if not absolute.is_file():
            what = "is not a file" if absolute.exists() else "does not exist"
            raise ConfigError(
                [ConfigProblem("", f"config file {absolute} {what} ({named.origin})")]
            )
        return ConfigLocation(absolute, named.origin)
    candidates = config_search_path(env, cwd=cwd, system_file=system_file)
    for candidate in candidates:
        if candidate.path.is_file():
            return ConfigLocation(candidate.path.absolute(), candidate.origin)
    looked = ", ".join(str(candidate.path) for candidate in candidates)
    raise ConfigError(
        [
            ConfigProblem(
                "",
                f"no config file found; looked in: {looked} (copy config.example.toml to one of "
                f"them, pass --config PATH or set ${CONFIG_ENV_VAR})",
            )
        ]
    )


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Find (:func:`find_config_file`), read and validate the configuration, with
    ``WATCHDOG_GPU_*`` environment overrides (``__`` between nested names). Raises
    ``ConfigError`` listing every problem by dotted path; secrets are not looked up here (see
    :func:`~watchdog_gpu.config.checks.resolve_secrets`)."""
    env = dict(os.environ if environ is None else environ)
    location = find_config_file(path, env)
    data = read_toml(location.path)
    context = LoadContext(toml=data, environ=env)
    problems = _environment_problems(env, data)
    token = current_load.set(context)
    try:
        with config_directory(location.path.parent):
            settings = Settings()
    except ValidationError as error:
        # ``from None``: the pydantic error's text holds input values, which may be secrets.
        problems += problems_from_validation_error(error, env)
        raise ConfigError(_unique(problems + context.problems)) from None
    finally:
        current_load.reset(token)
    problems += context.problems
    if problems:
        raise ConfigError(_unique(problems))
    settings._config_file = location.path
    return settings


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML file; ``ConfigError`` (one problem, with the line) when it cannot be read
    or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", f"{path}: not UTF-8 text")]) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError([ConfigProblem("", f"{path}: cannot read: {reason}")]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([ConfigProblem("", _describe_toml_error(path, error))]) from None
    except RecursionError:
        raise ConfigError([ConfigProblem("", f"{path}: invalid TOML: {TOML_TOO_DEEP}")]) from None


def _describe_toml_error(path: Path, error: tomllib.TOMLDecodeError) -> str:
    # Python < 3.14 has no lineno attribute: the position is only in the message.
    message = str(error)
    match = re.search(r"\(at line (\d+), column (\d+)\)", message)
    if match is None:
        return f"{path}: invalid TOML: {message}"
    reason = message[: match.start()].strip()
    return f"{path}: invalid TOML at line {match[1]}, column {match[2]}: {reason}"


def _environment_problems(
    environ: Mapping[str, str], toml: Mapping[str, Any]
) -> list[ConfigProblem]:
    # pydantic-settings silently ignores WATCHDOG_GPU_<UNKNOWN>__<OPTION>: a misspelt override
    # must not be. A prefixed name without "__" is left alone unless it names a section: tools
    # around the daemon use such names for their own purposes (e.g. WATCHDOG_GPU_CLIENT_VENVS).
    referenced = set(_referenced_env_names(toml))
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV_VAR or name in referenced:
            continue
        section, nested, _ = upper[len(ENV_PREFIX) :].partition(ENV_NESTED_DELIMITER)
        if section.lower() not in Settings.model_fields and nested:
            options = ", ".join(Settings.model_fields)
            problems.append(
                ConfigProblem("", f"unknown environment variable {name} (sections: {options})")
            )
        elif nested and section.lower() == "accounts":
            problems.append(
                ConfigProblem(
                    "accounts",
                    f"{name}: accounts can only be overridden whole, as a JSON list in "
                    f"{ENV_PREFIX}ACCOUNTS",
                )
            )
    return problems


def environment_overrides(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(dotted path, variable)`` for every ``WATCHDOG_GPU_<SECTION>[__<OPTION>...]`` variable
    that sets a configuration value (they win over the file), sorted by path."""
    found = []
    for name in environ:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV_VAR:
            continue
        parts = upper[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER)
        if parts[0] in Settings.model_fields and all(parts):
            found.append((".".join(parts), name))
    return sorted(found)


def _referenced_env_names(value: object) -> Iterator[str]:
    """Names used in ``{ env = "NAME" }`` references (they may carry the prefix on purpose)."""
    if isinstance(value, Mapping):
        if set(value) == {"env"} and isinstance(value["env"], str):
            yield value["env"]
        for item in value.values():
            yield from _referenced_env_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _referenced_env_names(item)


def _unique(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    return list(dict.fromkeys(problems))


def format_location(loc: tuple[int | str, ...]) -> str:
    """``("accounts", 1, "api_key")`` → ``accounts[1].api_key``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def problems_from_validation_error(
    error: ValidationError, environ: Mapping[str, str] | None = None
) -> list[ConfigProblem]:
    """One problem per pydantic error, with a dotted path and a message that never repeats the
    offending value (it may be a secret) except for a choice among fixed words."""
    problems = []
    for detail in error.errors(include_url=False):
        loc = tuple(part for part in detail["loc"] if not _is_schema_tag(part))
        message = _message(detail, loc)
        variable = _environment_source(loc, environ or {})
        if variable:
            message += f" (from ${variable})"
        problems.append(ConfigProblem(format_location(loc), message))
    return problems


def _is_schema_tag(part: int | str) -> bool:
    # Union members show up in locations as e.g. "function-plain[_validate()]".
    return isinstance(part, str) and "[" in part and part.endswith("]")


def _message(detail: ErrorDetails, loc: tuple[int | str, ...]) -> str:
    kind = detail["type"]
    if kind == "extra_forbidden":
        return _unknown_option_message(loc)
    if kind == "missing":
        return "required option is missing"
    if kind in {"model_type", "dict_type", "model_attributes_type"}:
        return "must be a table"
    if kind == "list_type":
        return "must be a list (a TOML array)"
    if kind == "literal_error":
        given = detail.get("input")
        shown = (
            f" (got {given!r})" if isinstance(given, str | int) and len(str(given)) <= 40 else ""
        )
        return detail["msg"] + shown
    return detail["msg"].removeprefix("Value error, ")


def _unknown_option_message(loc: tuple[int | str, ...]) -> str:
    allowed = _options_at(loc[:-1])
    message = "unknown option"
    if not allowed:
        return message
    legacy = _legacy_durations_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), [*allowed, *legacy], n=1)
    if close and close[0] in legacy:
        message += f"; did you mean {legacy[close[0]][0]!r} (formerly {close[0]!r})?"
    elif close:
        message += f"; did you mean {close[0]!r}?"
    return message + f" (options here: {', '.join(allowed)})"


def _legacy_durations_at(loc: tuple[int | str, ...]) -> Mapping[str, tuple[str, str]]:
    """The deprecated duration keys the model at ``loc`` still reads (old → new, unit)."""
    annotation: Any = Settings
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return {}
    model = _model_in(annotation)
    return getattr(model, "LEGACY_DURATIONS", {}) if model is not None else {}


def _options_at(loc: tuple[int | str, ...]) -> list[str]:
    """The option names of the model at ``loc`` under :class:`Settings` (empty if unknown)."""
    annotation: Any = Settings
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    model = _model_in(annotation)
    return list(_options_of(model)) if model is not None else []


def _options_of(model: type[BaseModel]) -> dict[str, Any]:
    """Each option of ``model`` and its type: its fields, or the registry's rule tables."""
    if issubclass(model, RulesConfig):
        return dict(RulesConfig.tables())
    return {name: field.annotation for name, field in model.model_fields.items()}


def _step(annotation: Any, part: int | str) -> Any:
    model = _model_in(annotation)
    if model is not None:
        return _options_of(model).get(str(part))
    for arg in _type_args(annotation):
        origin = typing.get_origin(arg)
        if origin is list and isinstance(part, int):
            return typing.get_args(arg)[0]
        if origin is dict and isinstance(part, str):
            return typing.get_args(arg)[1]
    return None


def _type_args(annotation: Any) -> list[Any]:
    """The annotation itself, or the members of a union (``X | None``)."""
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        return list(typing.get_args(annotation))
    return [annotation]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for arg in _type_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _environment_source(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> str | None:
    """The ``WATCHDOG_GPU_*`` variable that set the value at ``loc``, if one did."""
    names = {name.upper(): name for name in environ}
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            break
        parts.append(part)
    for length in range(len(parts), 0, -1):
        candidate = ENV_PREFIX + ENV_NESTED_DELIMITER.join(parts[:length]).upper()
        if candidate in names:
            return names[candidate]
    return None
