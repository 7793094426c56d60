"""The exception tree of watchdog-gpu.

::

    WatchdogError
    ├── ConfigError                 invalid configuration; carries every problem by dotted path
    ├── StoreError                  the database could not be opened, migrated or written
    │   └── SchemaTooNewError       a newer watchdog-gpu wrote it (exit 2: upgrade the package)
    ├── DatabaseInUseError          another daemon (or ``once``) holds the database's lock
    ├── ProviderError               a provider API call failed (never carries the API key)
    │   ├── AuthError               401/403: the key is wrong or revoked; not retried
    │   ├── RateLimitedError        429 after the retry budget; carries retry_after_seconds
    │   ├── TransientError          5xx, timeouts, connection errors after the retry budget
    │   │   └── RetryCancelledError     the daemon is stopping: a retry wait was cut short
    │   ├── PermanentError          4xx other than the above, or a payload we cannot read
    │   └── NotFoundError           the instance does not exist (destroy treats this as success)
    ├── ProbeError                  an SSH probe failed; ``status`` says how (a ProbeStatus value)
    │   └── DmonError               nvidia-smi printed an error text; ``kind`` names it
    └── ScenarioError               a scenario file is invalid (with its dotted path)

Messages are for humans and never contain secrets: provider errors are built from the status
code and a scrubbed, truncated body, never from request headers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Python's TOML parser recurses per level of nesting: a file nested deeply enough exhausts the
# stack. Both file readers (configuration, scenario) report it with these words.
TOML_TOO_DEEP = "tables or arrays are nested too deeply (no valid file comes close)"


class WatchdogError(Exception):
    """Base of every error this package raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem in a configuration: where (dotted path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(WatchdogError):
    """Invalid configuration. ``problems`` lists every problem found, not only the first."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(problem) for problem in self.problems))


class StoreError(WatchdogError):
    """The database could not be opened, migrated or written."""


class SchemaTooNewError(StoreError):
    """The database is at a revision this installation's migrations do not know: a newer
    watchdog-gpu wrote it. Nothing was changed; the commands exit 2 (upgrade the package)."""

    def __init__(self, revision: str, database: str) -> None:
        self.revision = revision
        self.database = database
        super().__init__(
            f"the database {database} was written by a newer watchdog-gpu (revision {revision}, "
            "unknown to this version); upgrade the package (pip install -U watchdog-gpu) or "
            "point --config/--db at another database"
        )


class DatabaseInUseError(WatchdogError):
    """Another process holds the database's lock (see ``watchdog_gpu.store.lock``): a second
    daemon, or ``once``, would act on the same fleet at the same time. The commands exit 2."""


class ProviderError(WatchdogError):
    """A provider API call failed. ``kind`` is the taxonomy name used in metrics and the store."""

    kind = "provider"

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class AuthError(ProviderError):
    kind = "auth"


class RateLimitedError(ProviderError):
    kind = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = 429,
        retry_after_seconds: float | None = None,
    ) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message, status_code=status_code)


class TransientError(ProviderError):
    kind = "transient"


class RetryCancelledError(TransientError):
    """A retry wait was cut short because the daemon is stopping. Transient for every caller: the
    call did not succeed and may be repeated later (a poll simply failed; a stop/destroy goes
    back to pending and is resumed at the next start)."""


class PermanentError(ProviderError):
    kind = "permanent"


class NotFoundError(ProviderError):
    kind = "not_found"


class ProbeError(WatchdogError):
    """An SSH probe failed. ``status`` is a ``ProbeStatus`` value (kept as text to stay light)."""

    def __init__(self, message: str, *, status: str) -> None:
        self.status = status
        super().__init__(message)


class DmonError(WatchdogError):
    """nvidia-smi printed an error instead of samples.

    ``kind`` is one of: nvml_missing, driver_not_loaded, version_mismatch, no_devices, gpu_lost,
    not_supported, invalid_argument, unparseable (the contract of ``watchdog-gpu dmon parse``).
    """

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class ScenarioError(WatchdogError):
    """A scenario file is invalid; ``problems`` lists each with its dotted path."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(problem) for problem in self.problems))
