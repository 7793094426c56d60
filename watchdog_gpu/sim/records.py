"""The mutable bookkeeping of the simulated world and the frozen views it hands out.

Records (``_``-free names, but internal to :mod:`watchdog_gpu.sim`) are only touched under the
world's lock; views are immutable snapshots that the dialect servers and tests may keep.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from watchdog_gpu.sim.gpu import GpuState, GpuTimeline, read_gpus
from watchdog_gpu.sim.provider_states import ProviderState, generic_billing
from watchdog_gpu.sim.scenario import ApiMode, ScenarioAccount, ScenarioInstance, ScenarioVolume

# States in which an instance exists (and so bills storage); compute bills in the first two.
EXISTING_STATES = frozenset({"starting", "running", "paused", "stopped"})
COMPUTE_STATES = frozenset({"starting", "running"})

# The divisor each provider uses to turn $/GB/month into $/h (docs/providers.md). Vast's
# ``storage_total_cost`` is exactly disk × storage_cost / 720 (both OpenAPI examples); Lambda's
# billing page prices a month as 720 hours; RunPod does not say (730, the calendar average).
HOURS_PER_MONTH = {"vast": 720.0, "runpod": 730.0, "lambda": 720.0}

# An instance without a scripted SSH port listens on this plus its ordinal.
_SSH_PORT_BASE = 22000


class SimError(Exception):
    """A request the simulated provider refuses; ``kind`` names why."""

    kind = "sim"


class UnknownAccountError(SimError):
    kind = "unknown_account"


class UnknownInstanceError(SimError):
    """No such instance: never existed, not created yet, or already gone."""

    kind = "not_found"


class UnsupportedActionError(SimError):
    """The provider has no such operation (e.g. stopping a Lambda instance)."""

    kind = "unsupported"


class InvalidRequestError(SimError):
    kind = "invalid"


@dataclass
class InstanceRecord:
    spec: ScenarioInstance
    account: str
    provider: str
    ordinal: int
    timeline: GpuTimeline
    state: str | None = None
    # The provider's own state when a scenario set one (else the dialect's default rendering).
    provider_state: ProviderState | None = None
    history: list[tuple[datetime, str | None]] = field(default_factory=list)
    created_at: datetime | None = None
    started_at: datetime | None = None
    state_since: datetime | None = None
    destroy_due: datetime | None = None
    label: str | None = None
    compute_spend_usd: float = 0.0
    storage_spend_usd: float = 0.0

    @property
    def exists(self) -> bool:
        return self.state in EXISTING_STATES

    @property
    def spend_usd(self) -> float:
        return self.compute_spend_usd + self.storage_spend_usd

    @property
    def billing(self) -> bool:
        """Whether the instance bills at all: it exists and no destroy was accepted. A destroy
        stops the bill at the call; the row stays listed in the provider's terminating state
        (Vast ``unloaded``, RunPod ``TERMINATED``, Lambda ``terminating``), which bills nothing
        (docs/providers.md), until it disappears."""
        return self.state in EXISTING_STATES and self.destroy_due is None

    @property
    def compute_billed(self) -> bool:
        """Whether compute bills now: per the scripted provider state, else per the provider
        state the generic one stands for (a Vast instance that is starting is loading, which
        bills no GPU yet)."""
        if self.state is None or not self.billing:
            return False
        exact = self.provider_state or generic_billing(self.provider, self.state)
        if exact is not None:
            return exact.compute
        return self.state in COMPUTE_STATES

    def compute_usd_per_hour(self) -> float:
        """The compute rate billed now (after a RunPod Savings Plan or a Vast reserved-instance
        discount)."""
        if not self.compute_billed:
            return 0.0
        spec = self.spec
        return spec.compute_usd_per_hour * (1 - spec.savings_plan_discount - spec.reserved_discount)

    def storage_usd_per_hour(self, state: str | None = None) -> float:
        """Storage rate in ``state`` (default: the current one, with its provider state). Paused
        bills like stopped: a preempted RunPod spot pod is simply EXITED, with the stopped
        volume rate."""
        if state is None:
            state = self.state
            if not self.billing:
                return 0.0
            if self.provider_state is not None and not self.provider_state.storage:
                return 0.0
        if state not in EXISTING_STATES:
            return 0.0
        base = (
            self.spec.disk_gb * self.spec.storage_usd_per_gb_month / HOURS_PER_MONTH[self.provider]
        )
        if state in ("stopped", "paused"):
            return base * self.spec.stopped_storage_multiplier
        return base

    def state_at(self, instant: datetime) -> str | None:
        times = [moment for moment, _ in self.history]
        position = bisect.bisect_right(times, instant) - 1
        return self.history[position][1] if position >= 0 else None

    def view(self, now: datetime, origin: datetime) -> InstanceView:
        """The instance as the provider describes it at ``now`` (``origin``: offset 0)."""
        assert self.state is not None
        assert self.created_at is not None
        assert self.state_since is not None
        spec = self.spec
        offset = now - origin
        gpu = read_gpus(self.timeline.settings_at(offset), offset, self.state, self.ordinal)
        return InstanceView(
            account=self.account,
            provider=self.provider,
            instance_id=spec.id,
            ordinal=self.ordinal,
            name=spec.name or spec.id,
            label=self.label,
            state=self.state,
            destroying=self.destroy_due is not None,
            interruptible=spec.interruptible,
            provider_state=self.provider_state,
            compute_billed=self.compute_billed,
            network_volume=spec.network_volume,
            savings_plan_discount=spec.savings_plan_discount,
            serverless_endpoint=spec.serverless_endpoint,
            reserved_discount=spec.reserved_discount,
            gpu_name=spec.gpu_name,
            gpu_count=spec.gpu_count,
            compute_usd_per_hour=spec.compute_usd_per_hour,
            storage_usd_per_hour=self.storage_usd_per_hour(),
            storage_usd_per_hour_running=self.storage_usd_per_hour("running"),
            storage_usd_per_gb_month=spec.storage_usd_per_gb_month,
            disk_gb=spec.disk_gb,
            ssh_host=spec.ssh_host,
            ssh_port=spec.ssh_port or _SSH_PORT_BASE + self.ordinal,
            created_at=self.created_at,
            started_at=self.started_at,
            state_since=self.state_since,
            gpu=gpu,
            spend_usd=self.spend_usd,
        )


@dataclass
class VolumeRecord:
    spec: ScenarioVolume
    provider: str
    created_at: datetime
    spend_usd: float = 0.0
    deleted: bool = False

    def usd_per_hour(self) -> float:
        if self.deleted:
            return 0.0
        return (
            self.spec.size_gb * self.spec.storage_usd_per_gb_month / HOURS_PER_MONTH[self.provider]
        )

    def view(self, mounted: bool) -> VolumeView:
        """The volume as listed; ``mounted``: an existing pod mounts it."""
        return VolumeView(
            volume_id=self.spec.id,
            name=self.spec.name or self.spec.id,
            size_gb=self.spec.size_gb,
            storage_usd_per_gb_month=self.spec.storage_usd_per_gb_month,
            usd_per_hour=self.usd_per_hour(),
            attached=self.spec.attached or mounted,
            created_at=self.created_at,
        )


@dataclass
class SshKeyRecord:
    key_id: str
    name: str
    public_key: str
    created_at: datetime


@dataclass
class AccountRecord:
    spec: ScenarioAccount
    balance_usd: float | None
    spend_limit_usd_per_hour: float | None
    api_mode: ApiMode = "ok"
    exhausted: bool = False  # the zero-balance behaviour already ran for this episode
    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    volumes: dict[str, VolumeRecord] = field(default_factory=dict)
    ssh_keys: list[SshKeyRecord] = field(default_factory=list)
    next_ssh_key_id: int = 40001

    @classmethod
    def from_spec(
        cls,
        spec: ScenarioAccount,
        origin: datetime,
        ordinals: Iterator[int],
        *,
        spend_limit: float | None,
    ) -> AccountRecord:
        """The account as the scenario starts it: instances (numbered from ``ordinals``),
        volumes and SSH keys created at ``origin``; nothing scheduled yet."""
        record = cls(spec=spec, balance_usd=spec.balance_usd, spend_limit_usd_per_hour=spend_limit)
        for instance in spec.instances:
            record.instances[instance.id] = InstanceRecord(
                spec=instance,
                account=spec.name,
                provider=spec.provider,
                ordinal=next(ordinals),
                timeline=GpuTimeline(instance),
                label=instance.name or None,
            )
        for volume in spec.volumes:
            record.volumes[volume.id] = VolumeRecord(volume, spec.provider, origin)
        for key in spec.ssh_keys:
            key_id = str(record.next_ssh_key_id)
            record.ssh_keys.append(SshKeyRecord(key_id, key.name, key.public_key, origin))
            record.next_ssh_key_id += 1
        return record

    @property
    def provider(self) -> str:
        return self.spec.provider

    def usd_per_hour(self) -> float:
        instances = sum(
            record.compute_usd_per_hour() + record.storage_usd_per_hour()
            for record in self.instances.values()
        )
        return instances + sum(volume.usd_per_hour() for volume in self.volumes.values())

    def view(self) -> AccountView:
        total = sum(item.spend_usd for item in self.instances.values()) + sum(
            volume.spend_usd for volume in self.volumes.values()
        )
        return AccountView(
            name=self.spec.name,
            provider=self.provider,
            balance_usd=self.balance_usd,
            spend_usd_per_hour=self.usd_per_hour(),
            spend_limit_usd_per_hour=self.spend_limit_usd_per_hour,
            total_spend_usd=total,
            api_mode=self.api_mode,
        )


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One instance as the provider would describe it now."""

    account: str
    provider: str
    instance_id: str
    ordinal: int
    name: str
    label: str | None
    state: str
    destroying: bool
    interruptible: bool
    provider_state: ProviderState | None
    compute_billed: bool
    network_volume: str | None
    savings_plan_discount: float
    serverless_endpoint: str | None
    reserved_discount: float
    gpu_name: str
    gpu_count: int
    compute_usd_per_hour: float  # the instance's compute price (billed only while running)
    storage_usd_per_hour: float  # storage billed in the current state
    storage_usd_per_hour_running: float
    storage_usd_per_gb_month: float
    disk_gb: float
    ssh_host: str
    ssh_port: int
    created_at: datetime
    started_at: datetime | None
    state_since: datetime
    gpu: GpuState
    spend_usd: float

    @property
    def billed_usd_per_hour(self) -> float:
        compute = self.compute_usd_per_hour if self.compute_billed else 0.0
        discount = self.savings_plan_discount + self.reserved_discount
        return compute * (1 - discount) + self.storage_usd_per_hour


@dataclass(frozen=True, slots=True)
class AccountView:
    name: str
    provider: str
    balance_usd: float | None
    spend_usd_per_hour: float
    spend_limit_usd_per_hour: float | None
    total_spend_usd: float
    api_mode: ApiMode


@dataclass(frozen=True, slots=True)
class VolumeView:
    volume_id: str
    name: str
    size_gb: float
    storage_usd_per_gb_month: float
    usd_per_hour: float
    attached: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SshKeyView:
    key_id: str
    name: str
    public_key: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """Something done to an instance through the API or by the provider itself."""

    at: datetime
    account: str
    instance_id: str
    action: str  # stop | start | destroy | gone | zero_balance_stop | zero_balance_terminate
    source: str  # api | provider | script
