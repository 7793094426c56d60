"""The frozen domain types every part of watchdog-gpu shares.

Nothing here performs I/O or reads the clock: these are plain values that the provider parsers
produce, the store records and returns, the rules read and the planner turns into actions.

Conventions:
- every datetime is timezone-aware UTC;
- money is US dollars (``usd``), rates are dollars per hour (``usd_per_hour``);
- ``None`` means "not known", never zero. A cost of ``None`` is unknown, not free; a utilisation
  of ``None`` is "not available", not idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class InstanceState(StrEnum):
    """Normalised instance state (``docs/providers.md``). Anything a provider reports that we do not
    map becomes ``UNKNOWN``: never a crash, never "idle"."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"  # interruptible/spot that lost its GPU: disk still bills
    STOPPED = "stopped"  # stopped by the user or the provider: disk still bills
    GONE = "gone"  # terminated, destroyed or absent from the listing
    UNKNOWN = "unknown"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class ActionKind(StrEnum):
    """What the planner may do to an instance. ``NOTIFY`` findings never touch an instance."""

    NOTIFY = "notify"
    STOP = "stop"
    DESTROY = "destroy"


class Verdict(StrEnum):
    """Per GPU per sample (or per window): did the GPU work?"""

    BUSY = "busy"
    IDLE = "idle"
    UNKNOWN = "unknown"


class ProbeStatus(StrEnum):
    """How one SSH probe of one instance ended."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth_failed"
    HOST_KEY_CHANGED = "host_key_changed"
    TIMEOUT = "timeout"
    DRIVER_ERROR = "driver_error"
    UNPARSEABLE = "unparseable"


class SampleSource(StrEnum):
    DMON = "dmon"  # nvidia-smi dmon over SSH
    PROVIDER_API = "provider_api"  # e.g. RunPod's per-GPU utilisation


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """Identity of an instance: account names are unique across the configuration."""

    account: str
    instance_id: str

    @property
    def key(self) -> str:
        return f"{self.account}/{self.instance_id}"


@dataclass(frozen=True, slots=True)
class InstanceSnapshot:
    """One instance as a provider listed it at ``observed_at``.

    ``compute_usd_per_hour`` is the compute rate billed while the instance runs (the provider's
    own figure, never a catalogue price). ``storage_usd_per_hour`` is the disk rate billed in the
    *current* state (already including RunPod's doubled stopped-volume rate); it bills while the
    instance exists, whatever its state.
    """

    provider: str
    account: str
    instance_id: str
    name: str
    state: InstanceState
    raw_state: str
    observed_at: datetime
    interruptible: bool = False
    compute_usd_per_hour: float | None = None
    storage_usd_per_hour: float | None = None
    disk_gb: float | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    # When the provider says the instance was rented (RunPod's "Rented by User: <date>"): its
    # compute bills from then, but a pod stopped and resumed since may still carry an older date.
    rented_at: datetime | None = None
    # The provider's own per-GPU utilisation in percent (RunPod), oldest API first; None if absent.
    provider_gpu_util_percent: tuple[float | None, ...] | None = None
    # Ports the provider publishes to the internet (for the hygiene rule: Jupyter/HTTP exposed).
    public_ports: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # Provider fields that could not be read this time (a GraphQL partial error, a missing
    # optional field): the values that depend on them are None (unknown). For humans (doctor,
    # logs); never stored.
    unreadable: tuple[str, ...] = ()

    @property
    def ref(self) -> InstanceRef:
        return InstanceRef(self.account, self.instance_id)

    @property
    def has_ssh_endpoint(self) -> bool:
        return bool(self.ssh_host) and self.ssh_port is not None


def billed_usd_per_hour(
    state: InstanceState,
    compute_usd_per_hour: float | None,
    storage_usd_per_hour: float | None,
) -> float | None:
    """What an instance in ``state`` bills per hour; ``None`` when that cannot be known.

    Running and starting instances bill compute and storage; paused and stopped ones bill storage
    only; gone ones bill nothing; an unknown state bills an unknown amount.
    """
    if state is InstanceState.GONE:
        return 0.0
    if state is InstanceState.UNKNOWN or storage_usd_per_hour is None:
        return None
    if state in (InstanceState.PAUSED, InstanceState.STOPPED):
        return storage_usd_per_hour
    if compute_usd_per_hour is None:
        return None
    return compute_usd_per_hour + storage_usd_per_hour


# States in which a stop has taken effect: the GPU is released and only the disk bills. A stopped
# interruptible instance may be read as paused where the provider cannot say who stopped it
# (docs/providers.md, "Stop confirmation").
STOP_CONFIRMING_STATES = frozenset({InstanceState.STOPPED, InstanceState.PAUSED})


def stop_took_effect(state: InstanceState, *, interruptible: bool) -> bool:
    """Whether an instance listed in ``state`` confirms a stop we asked for: ``stopped``, or
    ``paused`` for an interruptible (bid/spot) instance — a stopped spot instance that the
    provider reports as paused has stopped all the same."""
    if state is InstanceState.STOPPED:
        return True
    return interruptible and state in STOP_CONFIRMING_STATES


def confirms_kill(kind: ActionKind, state: InstanceState, *, interruptible: bool) -> bool:
    """Whether an instance listed in ``state`` confirms a ``kind`` call we made: ``gone`` confirms
    either, a stop is also confirmed by :func:`stop_took_effect`."""
    if state is InstanceState.GONE:
        return True
    return kind is ActionKind.STOP and stop_took_effect(state, interruptible=interruptible)


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """Account-level money facts at ``observed_at``; each ``None`` means the API does not say."""

    provider: str
    account: str
    observed_at: datetime
    balance_usd: float | None = None
    spend_usd_per_hour: float | None = None
    spend_limit_usd_per_hour: float | None = None
    # True when auto-pay / a saved card tops the balance up (defeats a prepaid cap).
    autopay_enabled: bool | None = None


@dataclass(frozen=True, slots=True)
class VolumeSnapshot:
    """A network volume / filesystem that bills on its own (RunPod, Vast, Lambda)."""

    provider: str
    account: str
    volume_id: str
    name: str
    observed_at: datetime
    size_gb: float | None = None
    usd_per_hour: float | None = None
    attached: bool | None = None  # None: the API does not say whether anything uses it
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SshKeyRecord:
    """An SSH public key registered with the provider account (read by the hygiene rule)."""

    provider: str
    account: str
    key_id: str
    name: str
    public_key: str


@dataclass(frozen=True, slots=True)
class AccountObservation:
    """Everything one poll of one account saw. Lists are complete listings: an instance that was
    seen before and is absent now is ``gone``.

    ``problems`` names the secondary parts that failed this poll (``"account"``, ``"volumes"``,
    ``"ssh_keys"`` → a scrubbed ``"<error kind>: <message>"``), or that a listing of the
    instances alone did not list (``instance_listing.py``). A failed part is empty (or an
    all-``None`` account) and is NOT a complete listing: a volume missing from a failed listing
    is not gone. The instance listing never fails partially: without it there is no observation.
    """

    account: AccountSnapshot
    instances: tuple[InstanceSnapshot, ...]
    volumes: tuple[VolumeSnapshot, ...] = ()
    ssh_keys: tuple[SshKeyRecord, ...] = ()
    problems: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's utilisation at one instant. Every metric is a percentage or ``None`` (the tool
    printed ``-``: not available, which is not zero).

    ``covers_from`` is set on a sample condensed from a *continuous* run of rows (the streaming
    probe: one row a second, no gap longer than ``probe.stream.CONTIGUOUS_GAP``, one verdict):
    the GPU was observed throughout ``[covers_from, at]``. ``None`` marks a point sample (burst
    probe, provider API), whose neighbours within ``max_sample_gap`` bridge the time between
    them (``docs/safety.md``, "Blind time and the idle clock")."""

    account: str
    instance_id: str
    at: datetime
    gpu_index: int
    verdict: Verdict
    source: SampleSource = SampleSource.DMON
    sm: float | None = None
    mem: float | None = None
    enc: float | None = None
    dec: float | None = None
    jpg: float | None = None
    ofa: float | None = None
    covers_from: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """How one probe of one instance ended, with the samples it produced (none unless OK)."""

    account: str
    instance_id: str
    at: datetime
    status: ProbeStatus
    duration_seconds: float
    detail: str = ""  # human text, never a secret
    samples: tuple[GpuSample, ...] = ()
    interactive_login: bool | None = None  # someone has a terminal open: counts as activity
    # Read back from the store, an outcome stands for a run of identical probes (same status,
    # detail, login and sample count): ``at`` is the latest, ``first_at`` the first of them.
    first_at: datetime | None = None  # None: this probe alone
    repeats: int = 1
    mode: str | None = None  # "stream" or "burst" (probe/stream_buffer.ProbeMode); None: unknown


@dataclass(frozen=True, slots=True)
class StateSpan:
    """A run of identical observations of one instance: same state and same rates, from the first
    time it was seen so until the last."""

    state: InstanceState
    raw_state: str
    first_seen: datetime
    last_seen: datetime
    compute_usd_per_hour: float | None
    storage_usd_per_hour: float | None

    @property
    def billed_usd_per_hour(self) -> float | None:
        return billed_usd_per_hour(self.state, self.compute_usd_per_hour, self.storage_usd_per_hour)


class Activity(StrEnum):
    """What an instance's GPUs did, as the idle rule's clock judged it (activity_marks.py): ``busy``
    (a GPU worked lately), ``idle`` (the idle clock runs), ``blind`` (neither is known)."""

    BUSY = "busy"
    IDLE = "idle"
    BLIND = "blind"


@dataclass(frozen=True, slots=True)
class ActivityMark:
    """A recorded change of activity: ``activity`` from ``since`` on, until a later mark (a
    later mark with an earlier ``since`` overrides this one from its ``since``)."""

    activity: Activity
    since: datetime


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule's conclusion about one instance (or one account when ``instance_id`` is None).

    ``episode_started_at`` identifies the episode: the moment the condition began (e.g. the first
    idle sample of the window, the moment the instance was seen paused). Together with the rule
    and the instance it is the idempotency key for everything the planner derives from it.
    ``due_at`` is when the rule's limit is reached (the destructive action is due then); the
    warning goes out ``warn_before`` earlier, which the planner computes from the rule's config.
    """

    rule: str
    account: str
    instance_id: str | None
    severity: Severity
    action: ActionKind
    summary: str
    episode_started_at: datetime
    due_at: datetime
    evidence: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)
    usd_per_hour_at_stake: float | None = None
    # What the finding is about when one rule can say several things about one account or
    # instance (a volume, an SSH key, auto-pay): part of the subject, so each gets its own
    # episode key ("vast-main[ssh_key:k1]"). None for the usual one-finding-per-subject rules.
    topic: str | None = None
    # Episode keys of the same condition at another severity (low_balance's warning and its
    # critical topic): while this finding stands they changed severity, they are not resolved.
    same_condition_as: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        base = f"{self.account}/{self.instance_id}" if self.instance_id else self.account
        return f"{base}[{self.topic}]" if self.topic else base

    @property
    def episode_key(self) -> str:
        return f"{self.rule}:{self.subject}:{self.episode_started_at.isoformat()}"


class PlanStatus(StrEnum):
    """What the planner decided about a destructive finding this tick."""

    EXECUTE = "execute"  # enqueue the action now (dry-run in monitor mode)
    WARN = "warn"  # inside the warn_before window: warn, act later
    WAIT = "wait"  # not due and not yet in the warning window
    NOTIFY = "notify"  # a notify-only finding: alert, touch nothing
    PROTECTED = "protected"  # would act, but the instance is protected: report only
    SNOOZED = "snoozed"  # would act, but a snooze postpones it
    IN_PROGRESS = "in_progress"  # the action for this episode is already in the outbox
    BLOCKED = "blocked"  # the blast-radius fuse holds it until a human resets the fuse
    # due, but the fuse's rate limits (per tick, per hour) let it go ahead on a later tick
    DEFERRED = "deferred"


class ActionStatus(StrEnum):
    """Where an action is in the outbox (``ActionRecord.status`` holds one of these values).

    ``pending`` → ``claimed`` (an executor owns it) → ``called`` (the provider accepted the call)
    → ``verified`` (re-listing shows it done) or ``unverified`` (retried, escalated). ``failed``,
    ``held`` (salvage failed with on_failure="hold"), ``dry_run`` (monitor mode: recorded, nothing
    changed) and ``blocked`` (the blast-radius fuse) end an action without touching the instance.
    """

    PENDING = "pending"
    CLAIMED = "claimed"
    CALLED = "called"
    VERIFIED = "verified"
    UNVERIFIED = "unverified"
    FAILED = "failed"
    HELD = "held"
    DRY_RUN = "dry_run"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"  # a fuse-blocked action a human released with `fuse reset`


class ActionResult(StrEnum):
    """An action's sub-state in the outbox (its row's ``result``): what its latest step did,
    within its :class:`ActionStatus`. The stored values are these strings."""

    CALLING = "calling"  # claimed, marked right before the provider call (crash safety)
    CALLED = "called"  # the provider accepted the call; verifying
    CALL_FAILED = "call_failed"  # the call failed (outage, rate limit): retried
    CALL_REFUSED = "call_refused"  # the provider refused the call (bad key, 4xx): told, retried
    AWAITING_ACCOUNT = "awaiting_account"  # refused for the account's key: waits for it to read
    LISTING_FAILED = "listing_failed"  # the listing before the call failed: retried
    LISTING_CHANGED = "listing_changed"  # the instance moved on since the decision: waits
    SALVAGED = "salvaged"  # the salvage command ran; the call follows
    UNVERIFIED = "unverified"  # the call went out, the instance is still listed
    VERIFIED = "verified"  # a re-listing shows it done
    FAILED = "failed"  # given up (final)
    HELD = "held"  # salvage failed with on_failure = "hold"
    DRY_RUN = "dry_run"  # monitor mode: recorded, nothing changed
    CANCELLED = "cancelled"  # the condition cleared, or a guard (protection, snooze) stopped it
    FUSE_RESET = "fuse reset"  # held by the fuse, cancelled by `fuse reset`
    REPLANNED = "replanned"  # a cancelled action decided again on fresh findings


# The one definition of an *open* action (decided, not finished): the executor still carries out
# or verifies those in flight; ``held`` and ``blocked`` wait for a human. Every reader (the fleet
# view, ``status``, ``once``, the daemon's status line) imports these.
IN_FLIGHT_ACTION_STATUSES = (
    ActionStatus.PENDING,
    ActionStatus.CLAIMED,
    ActionStatus.CALLED,
    ActionStatus.UNVERIFIED,
)
OPEN_ACTION_STATUSES = (*IN_FLIGHT_ACTION_STATUSES, ActionStatus.HELD, ActionStatus.BLOCKED)


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """A stop or destroy the planner wants executed, keyed for idempotency. ``episode_key`` is
    the episode of the finding it comes from (``Finding.episode_key``), stored with it: readers
    take it from there, never from the idempotency key."""

    idempotency_key: str
    account: str
    instance_id: str
    rule: str
    kind: ActionKind
    dry_run: bool
    reason: str
    planned_at: datetime
    episode_key: str
    evidence: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)
    usd_per_hour_at_stake: float | None = None


@dataclass(frozen=True, slots=True)
class PlannedNotification:
    """A message to deliver, keyed so one episode yields one warning, one action message and one
    resolution."""

    idempotency_key: str
    severity: Severity
    title: str
    body: str
    created_at: datetime
    rule: str | None = None
    account: str | None = None
    instance_id: str | None = None
    # A batch (notify/render.render_batch): the messages it carries, each delivered with it.
    items: tuple[PlannedNotification, ...] = ()
