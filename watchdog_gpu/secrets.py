"""Secret references: where an API key, passphrase or token comes from, without holding it.

In the TOML file a secret is written as exactly one of::

    api_key = { env = "VAST_API_KEY" }              # an environment variable
    api_key = { file = "/etc/watchdog-gpu/vast" }   # a file (trailing newline stripped)
    api_key = { credential = "vast_api_key" }       # $CREDENTIALS_DIRECTORY/vast_api_key
                                                    # (systemd LoadCredential=)

or as a plain string, which works but leaves the secret in the config file (``config check``
warns). A reference is resolved when it is used, so a rotated file or credential is picked up.
Every resolved value is registered with the log redaction filter (:mod:`watchdog_gpu.log`).

Relative ``file`` paths are relative to the directory of the config file being loaded (the
daemon's working directory under systemd is its state directory, not where the config lives).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, SecretStr
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from watchdog_gpu.log import register_secret

SecretKind = Literal["env", "file", "credential", "plain"]
REFERENCE_KINDS: tuple[SecretKind, ...] = ("env", "file", "credential")

# A secret file larger than this is a mistake (a path to a log, /dev/zero): refuse to read it all.
MAX_SECRET_BYTES = 1024 * 1024

log = logging.getLogger(__name__)

# Secret files found readable by group or others, each warned about once per process (a
# reference is resolved at every use).
_exposed_warned: set[Path] = set()
_exposed_lock = threading.Lock()

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_base_directory: ContextVar[Path | None] = ContextVar("watchdog_gpu_config_dir", default=None)


@contextmanager
def config_directory(directory: Path) -> Iterator[None]:
    """Within the block, relative paths in validated config values are taken relative to
    ``directory`` (the directory of the config file being loaded)."""
    token = _base_directory.set(directory)
    try:
        yield
    finally:
        _base_directory.reset(token)


def current_config_directory() -> Path | None:
    """The directory of the config file being loaded (:func:`config_directory`), else None."""
    return _base_directory.get()


def resolve_config_path(path: Path) -> Path:
    """``path`` with ``~`` expanded and, if relative, joined to the config file's directory (see
    :func:`config_directory`; outside a load it stays relative to the working directory)."""
    expanded = path.expanduser()
    base = _base_directory.get()
    if expanded.is_absolute() or base is None:
        return expanded
    return base / expanded


@dataclass(frozen=True, slots=True)
class SecretStatus:
    """The outcome of looking a secret up: its value (``None`` if unavailable) and a short,
    value-free detail for humans: ``set``, ``missing``, ``empty``, ``unreadable: …``."""

    value: SecretStr | None
    detail: str


class SecretReference:
    """Where a secret comes from. Construct with :meth:`env`, :meth:`file`, :meth:`credential` or
    :meth:`plain`; as a pydantic field type it validates the TOML forms described above."""

    __slots__ = ("_kind", "_name", "_plain")

    def __init__(self, kind: SecretKind, name: str = "", plain: SecretStr | None = None) -> None:
        self._kind = kind
        self._name = name
        self._plain = plain

    @classmethod
    def env(cls, name: str) -> SecretReference:
        return cls("env", name)

    @classmethod
    def file(cls, path: str | Path) -> SecretReference:
        return cls("file", str(path))

    @classmethod
    def credential(cls, name: str) -> SecretReference:
        return cls("credential", name)

    @classmethod
    def plain(cls, value: str) -> SecretReference:
        return cls("plain", plain=SecretStr(value))

    @property
    def kind(self) -> SecretKind:
        return self._kind

    @property
    def name(self) -> str:
        """The variable name, file path or credential name ("" for a plain value)."""
        return self._name

    @property
    def is_plain_text(self) -> bool:
        """True when the secret is written into the config file itself."""
        return self._kind == "plain"

    @property
    def source(self) -> str:
        """Where the secret comes from, e.g. ``env VAST_API_KEY``; never the value."""
        if self._kind == "plain":
            return "plain text in the config file"
        return f"{self._kind} {self._name}"

    def lookup(self, environ: Mapping[str, str] | None = None) -> SecretStatus:
        """Read the secret now. Never raises for a missing or unreadable source: the status says
        why the value is ``None``. A found value is registered for log redaction."""
        env = os.environ if environ is None else environ
        status = self._read(env)
        if status.value is not None:
            register_secret(status.value)
        return status

    def resolve(self, environ: Mapping[str, str] | None = None) -> SecretStr | None:
        """The secret's value, or ``None`` when it is missing, empty or unreadable."""
        return self.lookup(environ).value

    def describe(self, environ: Mapping[str, str] | None = None) -> str:
        """``env VAST_API_KEY (set)``, ``credential k (missing: …)``: never the value."""
        return f"{self.source} ({self.lookup(environ).detail})"

    def _read(self, env: Mapping[str, str]) -> SecretStatus:
        if self._kind == "plain":
            return SecretStatus(self._plain, "set")
        if self._kind == "env":
            value = env.get(self._name)
            if value is None:
                return SecretStatus(None, "missing")
            return SecretStatus(SecretStr(value), "set") if value else SecretStatus(None, "empty")
        if self._kind == "credential":
            directory = env.get("CREDENTIALS_DIRECTORY")
            if not directory:
                return SecretStatus(None, "missing: $CREDENTIALS_DIRECTORY is not set")
            # systemd makes credentials readable by the service alone: no mode check.
            return _read_file(Path(directory) / self._name, check_mode=False)
        return _read_file(Path(self._name))

    def _key(self) -> tuple[str, str, str]:
        plain = self._plain.get_secret_value() if self._plain is not None else ""
        return (self._kind, self._name, plain)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretReference) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self._kind == "plain":
            return "SecretReference(plain='**********')"
        return f"SecretReference({self._kind}={self._name!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validate,
            serialization=core_schema.plain_serializer_function_ser_schema(_serialize),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        reference = {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {kind: {"type": "string"} for kind in REFERENCE_KINDS},
        }
        return {"oneOf": [{"type": "string"}, reference]}


def exposure(mode: int) -> str | None:
    """Who besides the owner can read a file of permission bits ``mode`` ("group and others",
    "group", "others"), or None when nobody else can."""
    bits = (("group", stat.S_IRGRP), ("others", stat.S_IROTH))
    readers = [who for who, bit in bits if mode & bit]
    return " and ".join(readers) or None


def warn_if_exposed(path: Path, mode: int) -> None:
    """Log once per path that a secret file is readable by group or others, and the fix."""
    readers = exposure(mode)
    if readers is None:
        return
    with _exposed_lock:
        if path in _exposed_warned:
            return
        _exposed_warned.add(path)
    log.warning(
        "secret file %s is readable by %s (mode %04o): anyone who can read it can use the key; "
        "fix: chmod 600 %s",
        path,
        readers,
        stat.S_IMODE(mode),
        path,
    )


def _read_file(path: Path, *, check_mode: bool = True) -> SecretStatus:
    try:
        with path.open("rb") as handle:
            if check_mode:
                warn_if_exposed(path, os.fstat(handle.fileno()).st_mode)
            data = handle.read(MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        return SecretStatus(None, "missing")
    except OSError as error:
        return SecretStatus(None, f"unreadable: {error.strerror or type(error).__name__}")
    if len(data) > MAX_SECRET_BYTES:
        return SecretStatus(None, "unreadable: larger than 1 MiB")
    try:
        text = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return SecretStatus(None, "unreadable: not UTF-8 text")
    return SecretStatus(SecretStr(text), "set") if text else SecretStatus(None, "empty")


_FORMS = 'a string or a table with exactly one of env, file, credential (e.g. { env = "NAME" })'


def _error(message: str) -> PydanticCustomError:
    return PydanticCustomError("secret_reference", message)


def _validate(value: object) -> SecretReference:
    """Pydantic validator. Error messages never contain the value (it may be the secret)."""
    if isinstance(value, SecretReference):
        return value
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str):
        if not value:
            raise _error("the secret is empty")
        return SecretReference.plain(value)
    if not isinstance(value, Mapping):
        raise _error(f"a secret is {_FORMS}")
    kind = _reference_kind(value)
    name = value[kind]
    if not isinstance(name, str) or not name.strip():
        raise _error(f"'{kind}' must be a non-empty string")
    return _REFERENCES[kind](name)


def _reference_kind(table: Mapping[object, object]) -> str:
    """The one key of a ``{ env | file | credential = ... }`` table."""
    keys = [str(key) for key in table]
    if len(keys) == 1 and keys[0] in REFERENCE_KINDS:
        return keys[0]
    # Only word-like keys are repeated back (a key could be a pasted secret).
    shown = [key if re.fullmatch(r"[A-Za-z_]{1,20}", key) else "?" for key in keys]
    found = ", ".join(shown) if keys else "none"
    raise _error(f"a secret reference has exactly one of env, file, credential (found: {found})")


def _env_reference(name: str) -> SecretReference:
    if not _ENV_NAME.fullmatch(name):
        # The name is not repeated: a key pasted in by mistake would end up in the error.
        raise _error("not an environment variable name (letters, digits and '_')")
    return SecretReference.env(name)


def _credential_reference(name: str) -> SecretReference:
    if "/" in name or name in {".", ".."}:
        raise _error("a credential name is a file name in $CREDENTIALS_DIRECTORY, not a path")
    return SecretReference.credential(name)


def _file_reference(name: str) -> SecretReference:
    return SecretReference.file(resolve_config_path(Path(name)))


_REFERENCES: dict[str, Callable[[str], SecretReference]] = {
    "env": _env_reference,
    "credential": _credential_reference,
    "file": _file_reference,
}


def _serialize(reference: SecretReference) -> object:
    if reference.is_plain_text:
        return "**********"
    return {reference.kind: reference.name}
