"""What every provider adapter offers, and the behaviour they share.

A provider adapter is built per configured account::

    Provider(account, client, api_key, *, sleep, monotonic, retry_budget_seconds=60, rng=None)

where ``client`` is an ``httpx.Client`` whose ``base_url`` is the account's ``api_url`` (default
in ``watchdog_gpu.providers.DEFAULT_API_URLS``), and ``sleep``/``monotonic`` come from the Clock.
Every call goes through :class:`watchdog_gpu.providers.http.ProviderHttp` (key in a header,
timeouts, bounded retries, typed errors, scrubbed payloads); every payload is mapped by the pure
functions in :mod:`watchdog_gpu.providers.parsing`, whose state tables (``StateTable``) send any
unlisted provider state to ``unknown``.

``observe`` and partial failures: the instance listing is the part that matters (the paused,
stopped and idle rules read it), so it is fetched first and its failure fails the observation.
The account, volume and SSH-key calls are secondary: when one fails, the observation still
carries the instances, the failed part is empty (volumes, keys) or all-unknown (account), and
``AccountObservation.problems`` names it with a scrubbed message — so nobody reads "no volumes"
as "every volume was deleted".
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import httpx

from watchdog_gpu.capabilities import Capabilities
from watchdog_gpu.errors import PermanentError, ProviderError
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    InstanceSnapshot,
    SshKeyRecord,
    VolumeSnapshot,
)
from watchdog_gpu.providers.http import ProviderHttp
from watchdog_gpu.providers.parsing.common import StateTable

__all__ = ["BaseProvider", "Provider", "StateTable"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class Provider(Protocol):
    """One provider account, as the poller and the executor use it."""

    account: str  # the configured account name

    @property
    def name(self) -> str:
        """The provider's registry name: "vast", "runpod", "lambda"."""
        ...

    @property
    def supports_stop(self) -> bool:
        """Whether ``stop`` exists for this provider (else only ``destroy``)."""
        ...

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        """Every instance the account has now (all pages). Raises ``ProviderError``."""
        ...

    def get_account(self, now: datetime) -> AccountSnapshot:
        """Balance/credit, spend rate, spend limit and auto-pay where the API tells them."""
        ...

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
        """Separately billed storage (Vast volumes, RunPod network volumes, Lambda filesystems)."""
        ...

    def list_ssh_keys(self) -> tuple[SshKeyRecord, ...]:
        """SSH public keys registered with the account."""
        ...

    def observe(self, now: datetime) -> AccountObservation:
        """All of the above in one observation (see the module docstring for failures)."""
        ...

    def destroy(self, instance_id: str) -> None:
        """Destroy/terminate an instance. An instance that is already gone is success."""
        ...

    def stop(self, instance_id: str) -> None:
        """Stop an instance (GPU released, disk kept). ``PermanentError`` where unsupported."""
        ...


class BaseProvider:
    """Shared constructor and ``observe`` for the HTTP provider adapters."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]  # the provider's entry in watchdog_gpu.capabilities
    supports_stop: ClassVar[bool] = True

    def __init__(
        self,
        account: str,
        client: httpx.Client,
        api_key: str,
        *,
        sleep: Callable[[float], None],
        monotonic: Callable[[], float],
        retry_budget_seconds: float = 60,
        rng: random.Random | None = None,
    ) -> None:
        self.account = account
        self.http = ProviderHttp(
            provider=self.name,
            account=account,
            client=client,
            api_key=api_key,
            sleep=sleep,
            monotonic=monotonic,
            retry_budget_seconds=retry_budget_seconds,
            rng=rng,
        )

    def close(self) -> None:
        """Close the account's ``httpx.Client``."""
        self.http.client.close()

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(account={self.account!r})"

    def list_instances(self, now: datetime) -> tuple[InstanceSnapshot, ...]:
        raise NotImplementedError

    def get_account(self, now: datetime) -> AccountSnapshot:
        raise NotImplementedError

    def list_volumes(self, now: datetime) -> tuple[VolumeSnapshot, ...]:
        raise NotImplementedError

    def list_ssh_keys(self) -> tuple[SshKeyRecord, ...]:
        raise NotImplementedError

    def destroy(self, instance_id: str) -> None:
        raise NotImplementedError

    def stop(self, instance_id: str) -> None:
        raise PermanentError(f"{self.name}: stopping an instance is not supported")

    def observe(self, now: datetime) -> AccountObservation:
        """Instances (required), then account, volumes and SSH keys (each allowed to fail)."""
        instances = self.list_instances(now)
        problems: dict[str, str] = {}
        account = self._secondary("account", problems, lambda: self.get_account(now))
        volumes = self._secondary("volumes", problems, lambda: self.list_volumes(now))
        ssh_keys = self._secondary("ssh_keys", problems, self.list_ssh_keys)
        return AccountObservation(
            account=account or AccountSnapshot(self.name, self.account, now),
            instances=instances,
            volumes=volumes or (),
            ssh_keys=ssh_keys or (),
            problems=problems,
        )

    def _secondary(self, part: str, problems: dict[str, str], call: Callable[[], T]) -> T | None:
        try:
            return call()
        except ProviderError as error:
            problems[part] = describe_error(error)
            logger.warning(
                "observation part failed provider=%s account=%s part=%s error_kind=%s",
                self.name,
                self.account,
                part,
                error.kind,
            )
            return None


def describe_error(error: ProviderError) -> str:
    """``"<kind>: <message>"`` — the message is already scrubbed by ``ProviderHttp``."""
    return f"{error.kind}: {error}"
