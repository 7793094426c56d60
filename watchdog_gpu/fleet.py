"""FleetView: the read-only picture of recorded state that the rules and the planner decide from.

The store builds it (``Store.load_fleet_view``) from what was recorded; the rules and the planner
only read it. It is a plain value: the tests and the simulator build one directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from watchdog_gpu.evidence import AccountEvidence, default_evidence
from watchdog_gpu.model import (
    AccountSnapshot,
    ActionKind,
    ActionStatus,
    ActivityMark,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    SshKeyRecord,
    StateSpan,
    VolumeSnapshot,
)


@dataclass(frozen=True, slots=True)
class AcceptedCall:
    """A ``kind`` call (stop or destroy) the provider accepted at ``at`` and a listing confirmed."""

    kind: ActionKind
    at: datetime


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One instance's recorded history.

    ``spans`` is every state/rate run since ``first_seen`` that overlaps the view's lookback
    (oldest first; the last one is the current state). ``samples`` and ``probes`` cover the
    lookback window (oldest first; ``probes`` carry no samples, those are in ``samples``).
    The Store's views hold the samples as a compact
    :class:`~watchdog_gpu.sample_history.SampleHistory`; a view built by hand may hold a tuple
    (the rules read either through ``sample_history``).
    """

    latest: InstanceSnapshot
    first_seen: datetime
    spans: tuple[StateSpan, ...]
    samples: Sequence[GpuSample] = ()
    probes: tuple[ProbeOutcome, ...] = ()
    # The ledger's anchor: when the instance began billing before its first sighting (the
    # provider's start time, recorded once at that sighting and never recomputed); None when it
    # was first seen as it started, or not running (docs/safety.md, "Period spend").
    billed_from: datetime | None = None
    # Its latest stop or destroy that a listing confirmed, with the instant the provider accepted
    # the call: the provider stops billing there, not at the listing that confirmed it a
    # verify_interval later, so the ledger ends the bill there (spend.view_billing_pieces).
    accepted_call: AcceptedCall | None = None

    @property
    def state(self) -> InstanceState:
        return self.latest.state

    @property
    def current_span(self) -> StateSpan | None:
        return self.spans[-1] if self.spans else None

    def state_since(self) -> datetime | None:
        """When the instance entered its current state (the first span of the trailing run of
        spans in that state, so a rate change does not reset it)."""
        since: datetime | None = None
        for span in reversed(self.spans):
            if span.state is not self.latest.state:
                break
            since = span.first_seen
        return since


@dataclass(frozen=True, slots=True)
class AccountView:
    """One configured account: its latest money facts and how polling it goes."""

    account: str
    provider: str
    latest: AccountSnapshot | None
    last_poll_ok_at: datetime | None
    # an errors.ProviderError.kind; None when the last poll worked
    last_poll_error_kind: str | None = None
    last_poll_error_at: datetime | None = None
    first_seen: datetime | None = None  # the account's first poll, whether it worked or not

    @property
    def unreadable_since(self) -> datetime | None:
        """Since when the account cannot be listed: its last poll that worked (or its first
        poll, when none ever did); ``None`` while the latest poll works."""
        if self.last_poll_error_kind is None:
            return None
        return self.last_poll_ok_at or self.first_seen or self.last_poll_error_at


@dataclass(frozen=True, slots=True)
class VolumeView:
    latest: VolumeSnapshot
    first_seen: datetime
    detached_since: datetime | None  # first observation of the current detached run, if detached


@dataclass(frozen=True, slots=True)
class RatedSpan:
    """A run of identical listings of something that bills at ``usd_per_hour`` (None:
    unknown), from ``first_seen`` until ``last_seen``."""

    first_seen: datetime
    last_seen: datetime
    usd_per_hour: float | None


@dataclass(frozen=True, slots=True)
class VolumeLedger:
    """What a volume / network volume / filesystem billed: its recorded rate runs (oldest
    first) and, once a complete listing no longer had it, ``gone_at``. Volumes gone inside the
    spend period stay in the view through this, so their spend never leaves the period."""

    account: str
    volume_id: str
    spans: tuple[RatedSpan, ...]
    gone_at: datetime | None = None


class ProtectionKind(StrEnum):
    INSTANCE_ID = "id"
    NAME_GLOB = "name"
    ACCOUNT = "account"


@dataclass(frozen=True, slots=True)
class Protection:
    """No rule destroys or stops a matching instance. ``account`` narrows an id or name glob to one
    account (None: any account)."""

    kind: ProtectionKind
    value: str
    account: str | None = None
    reason: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Snooze:
    """Destructive actions for the instance are postponed until ``until``."""

    account: str
    instance_id: str
    until: datetime
    created_at: datetime
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """An action already in the outbox (any status), as the planner and the spend report see it."""

    idempotency_key: str
    account: str
    instance_id: str
    rule: str
    kind: ActionKind
    status: ActionStatus
    dry_run: bool
    created_at: datetime
    episode_key: str  # the finding's episode this action belongs to (a column of its row)
    usd_per_hour_at_stake: float | None = None  # what the instance billed when it was decided
    accepted_at: datetime | None = None  # when the provider accepted the call (None: not known)


@dataclass(frozen=True, slots=True)
class FuseState:
    """The blast-radius fuse as recorded: ``latched`` after a trip until a human resets it;
    ``last_deferred_at`` is the latest tick whose rate limits deferred actions (a deferral wave
    that continues is announced once)."""

    latched: bool = False
    last_deferred_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FleetView:
    """Everything the rules and the planner may look at, as of ``now``."""

    now: datetime
    instances: Mapping[str, InstanceView] = field(default_factory=dict)  # by "account/instance_id"
    accounts: Mapping[str, AccountView] = field(default_factory=dict)  # by account name
    volumes: tuple[VolumeView, ...] = ()
    # Every volume that billed inside the spend period, gone ones included (for period spend).
    volume_ledgers: tuple[VolumeLedger, ...] = ()
    ssh_keys: tuple[SshKeyRecord, ...] = ()
    protections: tuple[Protection, ...] = ()
    snoozes: tuple[Snooze, ...] = ()
    recent_actions: tuple[ActionRecord, ...] = ()  # at least the last 24 hours
    notification_keys: frozenset[str] = frozenset()  # idempotency keys already enqueued
    # When each of those messages was enqueued (the record of warnings, see notices.py); a view
    # built without it knows the keys only.
    notice_times: Mapping[str, datetime] = field(default_factory=dict)
    fuse: FuseState = field(default_factory=FuseState)
    # What each configured account's GPU evidence can prove (evidence.py); an account not in it
    # gets the strict default (a provider's reading never proves idle).
    evidence: Mapping[str, AccountEvidence] = field(default_factory=dict)
    # Each instance's recorded activity marks (activity.py) that describe the view's window, in
    # the order recorded, by "account/instance_id"; loaded only when asked (the spend report).
    activity: Mapping[str, tuple[ActivityMark, ...]] = field(default_factory=dict)

    def evidence_of(self, snapshot: InstanceSnapshot) -> AccountEvidence:
        """What the GPU evidence of ``snapshot``'s account can prove."""
        found = self.evidence.get(snapshot.account)
        return found if found is not None else default_evidence(snapshot.account, snapshot.provider)

    def instances_of(self, account: str) -> tuple[InstanceView, ...]:
        return tuple(view for view in self.instances.values() if view.latest.account == account)
