"""The simulated provider world: accounts, instances and volumes billing over a clock.

:class:`SimulatedWorld` plays a :class:`~watchdog_gpu.sim.scenario.Scenario` forward lazily: each
public call first advances the world to ``clock.now()``, applying scripted events and integrating
billing, whose rates are piecewise constant, so spend is exact. Zero balance, billing and the
destroy delay (:data:`DESTROY_DELAYS`) behave as the providers document
(``docs/scenario-format.md``). Once a destroy is pending or done, scripted state events for the
instance are ignored. Thread-safe: one re-entrant lock guards everything.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from watchdog_gpu.clock import Clock, VirtualClock
from watchdog_gpu.sim.gpu import GpuState, read_gpus
from watchdog_gpu.sim.provider_states import (
    VAST_STOPPED_BY_VAST,
    ProviderState,
    scripted_state,
    unmapped_state,
)
from watchdog_gpu.sim.records import (
    COMPUTE_STATES,
    AccountRecord,
    AccountView,
    ActionRecord,
    InstanceRecord,
    InstanceView,
    SshKeyRecord,
    SshKeyView,
    UnknownAccountError,
    UnknownInstanceError,
    UnsupportedActionError,
    VolumeView,
)
from watchdog_gpu.sim.scenario import (
    AccountEvent,
    ApiMode,
    Scenario,
    ScenarioAccount,
)

DESTROY_DELAYS: Mapping[str, timedelta] = {
    "vast": timedelta(seconds=30),
    "runpod": timedelta(seconds=45),
    "lambda": timedelta(seconds=60),
}
"""How long after a destroy call each provider still lists the instance, in its terminating state
(which bills nothing: the bill stops at the call), before it is gone."""

DEFAULT_SPEND_LIMITS: Mapping[str, float] = {"runpod": 80.0}
"""RunPod's default account spend limit ($/h); the others have none."""

# Balance crossings further away than this (a century) are treated as never.
_NEVER_HOURS = 100 * 365 * 24
_ONE_HOUR = timedelta(hours=1)
# Two bills of one instance closer than this are one bill (float noise of segment sums).
_FLOAT_NOISE_USD = 1e-6
# Below this a balance counts as reached zero (float dust from microsecond-rounded crossings).
_BALANCE_EPSILON_USD = 1e-6


def cents_with_and_without(spend_usd: float, without_usd: float) -> tuple[float, float]:
    """(spent, without the watchdog), each rounded to the cent — the bill as an invoice shows it,
    which the watchdog's ledger (``watchdog-gpu report``) must equal. The two worlds bill in
    different segments, so an untouched instance's figures differ by float noise, and rounding
    each on its own could show a cent more spent than without: within
    :data:`_FLOAT_NOISE_USD` of each other they are the same bill, ``without``'s."""
    without = round(without_usd, 2) + 0.0  # + 0.0: never "-0.00"
    if abs(spend_usd - without_usd) < _FLOAT_NOISE_USD:
        return without, without
    return round(spend_usd, 2) + 0.0, without


class SimulatedWorld:
    """Provider accounts and instances driven by a scenario and a clock.

    ``origin`` is the instant of offset 0 (default: the scenario's ``start``); ``sim serve`` passes
    the moment it started so a scenario plays in real time. ``destroy_delays`` overrides
    :data:`DESTROY_DELAYS` per provider.
    """

    def __init__(
        self,
        scenario: Scenario,
        clock: Clock,
        *,
        origin: datetime | None = None,
        destroy_delays: Mapping[str, timedelta] | None = None,
    ) -> None:
        self.scenario = scenario
        self._clock = clock
        self.origin = origin if origin is not None else scenario.start
        self._destroy_delays = dict(DESTROY_DELAYS, **(destroy_delays or {}))
        self._lock = threading.RLock()
        self._billed_to = self.origin
        self._queue: list[tuple[datetime, int, Callable[[datetime], None]]] = []
        self._sequence = itertools.count()
        self._accounts: dict[str, AccountRecord] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._actions: list[ActionRecord] = []
        self._baseline: SimulatedWorld | None = None
        ordinals = itertools.count()
        for account in scenario.accounts:
            self._accounts[account.name] = self._build_account(account, ordinals)
            self._keys[(account.provider, account.effective_api_key)] = account.name

    # ----------------------------------------------------------------- reading
    def now(self) -> datetime:
        """The clock's current instant (the world is advanced to it)."""
        with self._lock:
            return self._advance()

    def account_for_key(self, provider: str, api_key: str) -> str | None:
        """The name of the ``provider`` account whose API key is ``api_key``, or None."""
        return self._keys.get((provider, api_key))

    def account_names(self, provider: str | None = None) -> list[str]:
        return [
            name
            for name, record in self._accounts.items()
            if provider is None or record.provider == provider
        ]

    def api_mode(self, account: str) -> ApiMode:
        """The fault currently injected on ``account``'s API (``"ok"`` when none)."""
        with self._lock:
            self._advance()
            return self._account(account).api_mode

    def account_view(self, account: str) -> AccountView:
        with self._lock:
            self._advance()
            return self._account(account).view()

    def list_instances(self, account: str) -> list[InstanceView]:
        """Every instance that exists now (including ones with a destroy pending), by ordinal."""
        with self._lock:
            now = self._advance()
            records = self._account(account).instances.values()
            return [record.view(now, self.origin) for record in records if record.exists]

    def instance(self, account: str, instance_id: str) -> InstanceView | None:
        """The instance if it exists now; None if it is gone, not yet created or never was."""
        with self._lock:
            now = self._advance()
            record = self._account(account).instances.get(instance_id)
            if record is None or not record.exists:
                return None
            return record.view(now, self.origin)

    def state(self, account: str, instance_id: str) -> str | None:
        """The scripted state now (``gone`` after a destroy; None before the instance exists)."""
        with self._lock:
            self._advance()
            return self._record(account, instance_id).state

    def gpu_state(self, account: str, instance_id: str, at: datetime | None = None) -> GpuState:
        """What an SSH probe of the instance sees at ``at`` (default now; never the future).

        Raises :class:`UnknownInstanceError` for an id the scenario does not have and
        ``ValueError`` for an instant later than now.
        """
        with self._lock:
            now = self._advance()
            instant = now if at is None else at
            if instant > now:
                raise ValueError("gpu_state cannot look into the future")
            return self._gpu_state_at(self._record(account, instance_id), instant)

    def gpu_history(
        self, account: str, instance_id: str, steps_back: Sequence[timedelta]
    ) -> tuple[datetime, list[GpuState]]:
        """Now — the clock's instant to the whole second, as ``nvidia-smi dmon`` stamps its
        rows — and what an SSH probe of the instance sees ``step`` before now for each of
        ``steps_back``.

        Advancing the world bills every account (O(instances)); a probe reads a dozen instants
        and a round probes every instance within a few virtual seconds. Advancing once per
        probe, to the whole second, lets a round advance once per virtual second instead of a
        dozen times per instance (which cost a 1,000-instance round ~90 CPU seconds: a
        benchmark's daemon on an accelerated clock never finished a round in a tick).

        Raises :class:`UnknownInstanceError` for an id the scenario does not have.
        """
        with self._lock:
            now = self._advance(self._clock.now().replace(microsecond=0))
            record = self._record(account, instance_id)
            return now, [self._gpu_state_at(record, now - step) for step in steps_back]

    def _gpu_state_at(self, record: InstanceRecord, instant: datetime) -> GpuState:
        offset = instant - self.origin
        return read_gpus(
            record.timeline.settings_at(offset),
            offset,
            record.state_at(instant),
            record.ordinal,
        )

    def volumes(self, account: str) -> list[VolumeView]:
        with self._lock:
            self._advance()
            record = self._account(account)
            # A volume is in use when scripted so or when an existing pod mounts it.
            mounted = {
                instance.spec.network_volume
                for instance in record.instances.values()
                if instance.exists and instance.spec.network_volume is not None
            }
            return [
                volume.view(volume.spec.id in mounted)
                for volume in record.volumes.values()
                if not volume.deleted
            ]

    def ssh_keys(self, account: str) -> list[SshKeyView]:
        with self._lock:
            return [
                SshKeyView(key.key_id, key.name, key.public_key, key.created_at)
                for key in self._account(account).ssh_keys
            ]

    def spend_usd(self, account: str, instance_id: str) -> float:
        """What the instance has billed so far (compute + storage)."""
        with self._lock:
            self._advance()
            return self._record(account, instance_id).spend_usd

    def spend_without_watchdog_usd(self, account: str, instance_id: str) -> float:
        """What the instance would have billed by now had nobody called the API: the same
        scenario replayed on its own virtual clock to the same instant."""
        with self._lock:
            now = self._advance()
            if self._baseline is None:
                self._baseline = SimulatedWorld(
                    self.scenario,
                    VirtualClock(self.origin),
                    origin=self.origin,
                    destroy_delays=self._destroy_delays,
                )
            baseline = self._baseline
        with baseline._lock:
            baseline._advance(now)
            return baseline._record(account, instance_id).spend_usd

    def actions(self) -> list[ActionRecord]:
        """Every stop/start/destroy so far, from the API, the provider or the script."""
        with self._lock:
            self._advance()
            return list(self._actions)

    # ----------------------------------------------------------------- acting
    def destroy(self, account: str, instance_id: str) -> bool:
        """Destroy the instance: its billing stops now, it is listed as terminating and becomes
        ``gone`` after the provider's delay.

        Returns True when accepted (also when a destroy is already pending); raises
        :class:`UnknownInstanceError` when it does not exist (gone, not yet created, unknown).
        """
        with self._lock:
            now = self._advance()
            record = self._existing(account, instance_id)
            if record.destroy_due is None:
                self._begin_destroy(account, record, now, source="api")
            return True

    def stop(self, account: str, instance_id: str) -> None:
        """Stop the instance now (GPU released, disk kept and billing).

        Raises :class:`UnsupportedActionError` on Lambda (no stop) and
        :class:`UnknownInstanceError` when it does not exist.
        """
        with self._lock:
            now = self._advance()
            record = self._existing(account, instance_id)
            if record.provider == "lambda":
                raise UnsupportedActionError("Lambda instances cannot be stopped")
            if record.destroy_due is None and record.state in COMPUTE_STATES:
                self._set_state(record, "stopped", now)
                self._log(now, account, instance_id, "stop", "api")

    def start(self, account: str, instance_id: str) -> None:
        """Start (resume) a stopped or paused instance now."""
        with self._lock:
            now = self._advance()
            record = self._existing(account, instance_id)
            if record.provider == "lambda":
                raise UnsupportedActionError("Lambda instances cannot be started")
            if record.destroy_due is None and record.state in ("stopped", "paused"):
                self._set_state(record, "running", now)
                self._log(now, account, instance_id, "start", "api")

    def set_label(self, account: str, instance_id: str, label: str) -> None:
        with self._lock:
            self._advance()
            self._existing(account, instance_id).label = label

    def delete_volume(self, account: str, volume_id: str) -> None:
        """Delete a volume (billing stops now); raises :class:`UnknownInstanceError` if absent."""
        with self._lock:
            self._advance()
            volume = self._account(account).volumes.get(volume_id)
            if volume is None or volume.deleted:
                raise UnknownInstanceError(f"no volume {volume_id}")
            volume.deleted = True

    def add_ssh_key(self, account: str, public_key: str, name: str = "") -> SshKeyView:
        with self._lock:
            now = self._advance()
            record = self._account(account)
            key = SshKeyRecord(str(record.next_ssh_key_id), name, public_key, now)
            record.next_ssh_key_id += 1
            record.ssh_keys.append(key)
            return SshKeyView(key.key_id, key.name, key.public_key, key.created_at)

    def delete_ssh_key(self, account: str, key_id: str) -> None:
        with self._lock:
            record = self._account(account)
            remaining = [key for key in record.ssh_keys if key.key_id != key_id]
            if len(remaining) == len(record.ssh_keys):
                raise UnknownInstanceError(f"no ssh key {key_id}")
            record.ssh_keys = remaining

    def replace_ssh_keys(self, account: str, public_keys: list[str]) -> None:
        """Replace every key (RunPod keeps all keys in one newline-separated ``pubKey``)."""
        with self._lock:
            now = self._advance()
            record = self._account(account)
            record.ssh_keys = []
            for public_key in public_keys:
                record.ssh_keys.append(
                    SshKeyRecord(str(record.next_ssh_key_id), "", public_key, now)
                )
                record.next_ssh_key_id += 1

    def set_api_mode(self, account: str, mode: ApiMode) -> None:
        """Inject a fault on the account's API from now on (tests; scripts use ``api`` events)."""
        with self._lock:
            self._advance()
            self._account(account).api_mode = mode

    # ----------------------------------------------------------------- building
    def _build_account(
        self, spec: ScenarioAccount, ordinals: itertools.count[int]
    ) -> AccountRecord:
        limit = spec.spend_limit_usd_per_hour
        if limit is None:
            limit = DEFAULT_SPEND_LIMITS.get(spec.provider)
        record = AccountRecord.from_spec(spec, self.origin, ordinals, spend_limit=limit)
        for item in record.instances.values():
            self._schedule_instance_events(item)
        for account_event in spec.events:
            self._schedule(
                self.origin + account_event.at, self._account_event(record, account_event)
            )
        return record

    def _schedule_instance_events(self, item: InstanceRecord) -> None:
        for event in item.spec.events:
            scripted = scripted_state(
                item.provider, event.state, event.provider_state, event.runtime, event.status_msg
            )
            at = self.origin + event.at
            if scripted is not None:
                self._schedule(at, self._scripted_state(item.account, item, *scripted))
            elif event.provider_state is not None:  # a raw state no table maps
                self._schedule(at, _scripted_raw_state(item, event.provider_state))

    def _scripted_state(
        self, account: str, record: InstanceRecord, state: str, exact: ProviderState | None
    ) -> Callable[[datetime], None]:
        def apply(at: datetime) -> None:
            if record.destroy_due is not None or record.state == "gone":
                return  # a destroyed instance does not come back
            if state != record.state or exact != record.provider_state:
                self._set_state(record, state, at, exact)
                if state in ("stopped", "gone", "paused"):
                    self._log(at, account, record.spec.id, state, "script")

        return apply

    def _account_event(
        self, record: AccountRecord, event: AccountEvent
    ) -> Callable[[datetime], None]:
        def apply(_at: datetime) -> None:
            if event.balance_usd is not None:
                # A new balance starts a new episode: at or below zero it triggers the
                # provider's zero-balance behaviour right away (see _settle_zero_balances).
                record.balance_usd = event.balance_usd
                record.exhausted = False
            if event.api is not None:
                record.api_mode = event.api
            if event.spend_limit_usd_per_hour is not None:
                record.spend_limit_usd_per_hour = event.spend_limit_usd_per_hour

        return apply

    # ----------------------------------------------------------------- time
    def _schedule(self, at: datetime, action: Callable[[datetime], None]) -> None:
        heapq.heappush(self._queue, (at, next(self._sequence), action))

    def _advance(self, target: datetime | None = None) -> datetime:
        """Play the world forward to ``target`` (default: the clock's now); return the instant
        the world is at (never earlier than before).

        Time moves in segments of constant rates, each ending at the next scheduled event, the
        next zero-balance crossing or ``target``, whichever comes first; events a segment's end
        triggers (a destroy finishing, a zero-balance stop) apply before the next segment bills.
        """
        target = self._clock.now() if target is None else target
        while True:
            due = self._next_due(target)
            stop = target if due is None else due
            if self._bill_towards(stop) < stop:
                continue  # a balance reached zero first; its consequences may be scheduled
            if due is None:
                break
            self._run_events_at(due)
        return max(target, self._billed_to)

    def _next_due(self, target: datetime) -> datetime | None:
        """The first scheduled instant at or before ``target`` (None: nothing due)."""
        if self._queue and self._queue[0][0] <= target:
            return self._queue[0][0]
        return None

    def _run_events_at(self, at: datetime) -> None:
        while self._queue and self._queue[0][0] == at:
            _, _, action = heapq.heappop(self._queue)
            action(at)
        self._settle_zero_balances(at)

    def _bill_towards(self, stop: datetime) -> datetime:
        """Bill one segment: up to ``stop`` or to the first zero-balance crossing before it
        (whose behaviour then runs). Returns the instant billed to."""
        if self._billed_to >= stop:
            return self._billed_to
        segment_end = stop
        crossing: AccountRecord | None = None
        for record in self._accounts.values():
            moment = self._zero_crossing(record)
            if moment is not None and moment < segment_end:
                segment_end, crossing = moment, record
        self._integrate(self._billed_to, segment_end)
        self._billed_to = segment_end
        if crossing is not None:
            self._zero_balance(crossing, segment_end)
        else:
            self._settle_zero_balances(segment_end)
        return self._billed_to

    def _settle_zero_balances(self, at: datetime) -> None:
        for record in self._accounts.values():
            if self._zero_crossing(record) == at:
                self._zero_balance(record, at)

    def _zero_crossing(self, record: AccountRecord) -> datetime | None:
        """When ``record``'s balance reaches zero at the current rates (None: not before the
        rates change). Rounded up to the microsecond, so the balance is ≤ 0 by then."""
        if record.balance_usd is None or record.exhausted or record.provider == "lambda":
            return None
        if record.balance_usd <= _BALANCE_EPSILON_USD:
            return self._billed_to
        rate = record.usd_per_hour()
        if rate <= 0:
            return None
        hours = record.balance_usd / rate
        if hours > _NEVER_HOURS:
            # A $100,000 balance and a 10 GB disk: zero is centuries away (past datetime.max);
            # no simulation runs that long, and a rate change recomputes the crossing.
            return None
        microseconds = math.ceil(hours * 3_600_000_000)
        return self._billed_to + timedelta(microseconds=microseconds)

    def _integrate(self, start: datetime, end: datetime) -> None:
        hours = (end - start) / _ONE_HOUR
        if hours <= 0:
            return
        for record in self._accounts.values():
            spent = 0.0
            for instance in record.instances.values():
                compute = instance.compute_usd_per_hour() * hours
                storage = instance.storage_usd_per_hour() * hours
                instance.compute_spend_usd += compute
                instance.storage_spend_usd += storage
                spent += compute + storage
            for volume in record.volumes.values():
                cost = volume.usd_per_hour() * hours
                volume.spend_usd += cost
                spent += cost
            if record.balance_usd is not None:
                record.balance_usd -= spent

    def _zero_balance(self, record: AccountRecord, at: datetime) -> None:
        record.exhausted = True
        for instance in record.instances.values():
            if not instance.exists or instance.destroy_due is not None:
                continue
            if record.provider == "vast" and instance.state in COMPUTE_STATES:
                self._set_state(instance, "stopped", at, VAST_STOPPED_BY_VAST)
                self._log(at, record.spec.name, instance.spec.id, "zero_balance_stop", "provider")
            elif record.provider == "runpod":
                self._begin_destroy(record.spec.name, instance, at, source="provider")

    # ----------------------------------------------------------------- transitions
    def _set_state(
        self,
        record: InstanceRecord,
        state: str,
        at: datetime,
        exact: ProviderState | None = None,
    ) -> None:
        """Move ``record`` to ``state`` (and the provider state ``exact``, if scripted; an API
        call or the provider's own behaviour clears it). The history holds what the probe
        sees: a running instance whose container cannot answer (Vast ``frozen``, Lambda
        ``unhealthy``) is recorded under its provider state, which the probe treats as down."""
        if record.created_at is None:
            record.created_at = at
        if state == "running" and record.state != "running":
            record.started_at = at
        record.state = state
        record.provider_state = exact
        record.state_since = at
        seen = exact.name if exact is not None and not exact.reachable else state
        record.history.append((at, seen))

    def _begin_destroy(
        self, account: str, record: InstanceRecord, at: datetime, *, source: str
    ) -> None:
        due = at + self._destroy_delays[record.provider]
        record.destroy_due = due
        action = "destroy" if source == "api" else "zero_balance_terminate"
        self._log(at, account, record.spec.id, action, source)

        def finish(moment: datetime) -> None:
            self._set_state(record, "gone", moment)
            self._log(moment, account, record.spec.id, "gone", "provider")

        self._schedule(due, finish)

    def _log(self, at: datetime, account: str, instance_id: str, action: str, source: str) -> None:
        self._actions.append(ActionRecord(at, account, instance_id, action, source))

    # ----------------------------------------------------------------- lookups
    def _account(self, name: str) -> AccountRecord:
        record = self._accounts.get(name)
        if record is None:
            raise UnknownAccountError(f"no account {name!r}")
        return record

    def _record(self, account: str, instance_id: str) -> InstanceRecord:
        record = self._account(account).instances.get(instance_id)
        if record is None:
            raise UnknownInstanceError(f"no instance {instance_id!r} in {account!r}")
        return record

    def _existing(self, account: str, instance_id: str) -> InstanceRecord:
        record = self._record(account, instance_id)
        if not record.exists:
            raise UnknownInstanceError(f"instance {instance_id!r} does not exist")
        return record


def _scripted_raw_state(record: InstanceRecord, raw: str) -> Callable[[datetime], None]:
    """The provider lists ``raw`` (a state no table maps) until the next state change; the
    instance keeps the billing and reachability of the state it is in."""

    def apply(at: datetime) -> None:
        if record.exists and record.destroy_due is None and record.state is not None:
            record.provider_state = unmapped_state(record.provider, record.state, raw)

    return apply
