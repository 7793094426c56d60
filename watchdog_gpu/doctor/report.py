"""What ``watchdog-gpu doctor`` found, as plain values (pure: no I/O, no clock).

The doctor reads each configured account once, probes each running instance once and runs the
real rules and planner over that one observation (see :mod:`watchdog_gpu.doctor.check`). This
module turns what it saw into a report: per account the key check, the money facts, the
instances and volumes with every field it could not read named, and what the rules would do.

``None`` is "could not be read" everywhere, never zero: every such field is listed in
``unknown`` so a user can see what the watchdog will be blind to before switching to enforce —
except an account fact the provider's API never reports, listed in ``not_offered`` (nothing
failed, nothing to fix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from watchdog_gpu.capabilities import (
    ACCOUNT_FACTS,
    AUTOPAY,
    BALANCE,
    CAPABILITIES,
    SPEND_LIMIT,
    SPEND_RATE,
)
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    Verdict,
    VolumeSnapshot,
    billed_usd_per_hour,
)
from watchdog_gpu.plan import Decision
from watchdog_gpu.probe.verdicts import combine_verdicts

# What each provider says about the privileges of an API key, for the key check. None of the
# three reports a key's scopes through the calls the watchdog makes (docs/doctor.md).
KEY_SCOPES: Mapping[str, str] = {
    "vast": (
        "Vast keys can be scoped but the API does not report the scopes of the key in use; "
        "least privilege is user_read + instance_read + instance_write"
    ),
    "runpod": (
        "RunPod keys can be scoped but the API does not report the scopes of the key in use; "
        "a key lacking a permission gets 403 on that call"
    ),
    "lambda": (
        "Lambda keys cannot be scoped: this key can launch and terminate every instance "
        "of the account (keep it to this machine)"
    ),
}


class KeyStatus:
    """The outcome of the key check (text values, as the JSON shows them)."""

    ACCEPTED = "accepted"  # the instance listing worked
    REJECTED = "rejected"  # 401/403: wrong, revoked or unscoped for listing
    UNREACHABLE = "unreachable"  # 5xx, timeouts, rate limits: the key could not be tried
    ERROR = "error"  # a payload we could not read


@dataclass(frozen=True, slots=True)
class KeyCheck:
    status: str
    detail: str
    scopes: str
    # Parts of the account the key could read instances for but not read (403 on account...).
    missing_permissions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProbeSummary:
    """One SSH probe: how it ended and what the GPUs did (``verdict`` over every sample)."""

    status: str
    detail: str
    gpus: int
    verdict: str  # busy | idle | unknown
    peak_util_percent: tuple[float | None, ...]  # per GPU index, the highest SM % sampled
    interactive_login: bool | None
    # Why it failed in plain words ("connection refused: …", "permission denied: …"); "" if ok.
    reason: str = ""


@dataclass(frozen=True, slots=True)
class InstanceReport:
    instance_id: str
    name: str
    raw_state: str
    state: str
    interruptible: bool
    compute_usd_per_hour: float | None
    storage_usd_per_hour: float | None
    billed_usd_per_hour: float | None  # what it bills in its current state
    ssh_endpoint: str | None
    gpu: str | None
    probe: ProbeSummary | None
    not_probed: str  # why there is no probe ("" when probed)
    unknown: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VolumeReport:
    volume_id: str
    name: str
    size_gb: float | None
    usd_per_hour: float | None
    attached: bool | None
    unknown: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AccountReport:
    name: str
    provider: str
    key: KeyCheck
    balance_usd: float | None = None
    spend_usd_per_hour: float | None = None
    spend_limit_usd_per_hour: float | None = None
    autopay_enabled: bool | None = None
    instances: tuple[InstanceReport, ...] = ()
    volumes: tuple[VolumeReport, ...] = ()
    problems: Mapping[str, str] = field(default_factory=dict)  # failed parts → error
    unknown: tuple[str, ...] = ()  # read failures: fields or parts the API did not give now
    # What the provider's API can do at all (watchdog_gpu.capabilities), in words.
    capabilities: tuple[str, ...] = ()
    # What its GPU evidence can prove (evidence.AccountEvidence.summary: what the rules act by).
    gpu_evidence: str = ""
    # Account facts this provider's API never reports (no read failure: nothing to fix).
    not_offered: tuple[str, ...] = ()

    @property
    def read(self) -> bool:
        """The instances could be listed (the part the rules need)."""
        return self.key.status == KeyStatus.ACCEPTED


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """What the rules and the planner would do now about one subject."""

    rule: str
    subject: str
    action: str  # notify | stop | destroy
    status: str  # a PlanStatus value
    dry_run: bool
    due_at: datetime
    summary: str
    note: str


@dataclass(frozen=True, slots=True)
class DoctorReport:
    at: datetime
    mode: str
    accounts: tuple[AccountReport, ...]
    verdicts: tuple[RuleVerdict, ...]
    failed_rules: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def failed_probes(self) -> int:
        """Probes that did not read the GPUs (those instances are blind to the rules)."""
        return sum(
            1
            for account in self.accounts
            for instance in account.instances
            if instance.probe is not None and instance.probe.status != ProbeStatus.OK.value
        )

    @property
    def healthy(self) -> bool:
        """Every account's instances could be read, every probe read its GPUs (as ``once``
        calls a tick with a failed probe degraded) and every rule ran."""
        return (
            all(account.read for account in self.accounts)
            and not self.failed_rules
            and not self.failed_probes
        )


# -- building it ----------------------------------------------------------------------------------


def key_check(
    provider: str, error_kind: str | None, error: str, problems: Mapping[str, str]
) -> KeyCheck:
    """The key check of one account: ``error_kind`` is the ProviderError kind of the failed
    instance listing (None when it worked); ``problems`` the secondary parts that failed."""
    scopes = KEY_SCOPES.get(provider, "the provider does not report the key's scopes")
    if error_kind is None:
        missing = tuple(sorted(part for part, why in problems.items() if why.startswith("auth")))
        detail = "the instance listing works with this key"
        if missing:
            detail += f"; refused for: {', '.join(missing)}"
        return KeyCheck(KeyStatus.ACCEPTED, detail, scopes, missing)
    if error_kind == "auth":
        return KeyCheck(KeyStatus.REJECTED, f"the provider refused the key: {error}", scopes)
    if error_kind in ("transient", "rate_limited"):
        return KeyCheck(KeyStatus.UNREACHABLE, f"could not reach the API: {error}", scopes)
    return KeyCheck(KeyStatus.ERROR, f"the listing could not be read: {error}", scopes)


def capability_notes(provider: str) -> tuple[str, ...]:
    """What ``provider``'s API can do, as the rules depend on it (docs/providers.md)."""
    caps = CAPABILITIES.get(provider)
    if caps is None:
        return ()
    if not caps.balance:
        balance = "balance: none (postpaid, so no balance floor)"
    elif caps.balance_spendable:
        balance = "balance: documented as spendable for every key (a balance floor may act)"
    else:
        balance = "balance: not documented as spendable for every key (a balance floor only alerts)"
    return (
        "stop: yes"
        if caps.can_stop
        else "stop: no, instances can only be terminated (a stop rule is rejected)",
        "interruptible instances: " + ("yes" if caps.interruptible else "none"),
        balance,
        "per-GPU utilisation from the API: " + ("yes" if caps.gpu_utilisation else "no (SSH only)"),
    )


def not_offered(provider: str) -> tuple[str, ...]:
    """The account facts ``provider``'s API never reports (Vast: no spend rate or limit;
    Lambda, postpaid: none of them): no read failure, so not in "could not read"."""
    caps = CAPABILITIES.get(provider)
    if caps is None:
        return ()
    return tuple(fact for fact in ACCOUNT_FACTS if fact not in caps.account_facts)


def account_unknowns(snapshot: AccountSnapshot) -> tuple[str, ...]:
    """The account's money facts the API offers but did not give this time (a fact the
    provider never reports is no unknown: :func:`not_offered` lists it)."""
    fields = {
        BALANCE: snapshot.balance_usd,
        SPEND_RATE: snapshot.spend_usd_per_hour,
        SPEND_LIMIT: snapshot.spend_limit_usd_per_hour,
        AUTOPAY: snapshot.autopay_enabled,
    }
    never = not_offered(snapshot.provider)
    return tuple(name for name, value in fields.items() if value is None and name not in never)


def probe_reason(status: str, detail: str) -> str:
    """Why a probe failed, in the words an operator searches for: "connection refused",
    "host key changed", "permission denied", "timed out" — then the probe's own detail."""
    lowered = detail.lower()
    if status == ProbeStatus.AUTH_FAILED.value:
        words = "permission denied"
    elif status == ProbeStatus.HOST_KEY_CHANGED.value:
        words = "host key changed"
    elif "refused" in lowered:
        words = "connection refused"
    elif status == ProbeStatus.TIMEOUT.value or "timed out" in lowered:
        words = "timed out"
    elif status == ProbeStatus.UNREACHABLE.value:
        words = "unreachable"
    else:
        words = status.replace("_", " ")
    return f"{words}: {detail}" if detail else words


def instance_unknowns(snapshot: InstanceSnapshot) -> tuple[str, ...]:
    """Every field of ``snapshot`` that could not be read, named for humans."""
    unknown = []
    if snapshot.state is InstanceState.UNKNOWN:
        unknown.append(f"state ({snapshot.raw_state!r} is not a state we map)")
    if snapshot.compute_usd_per_hour is None:
        unknown.append("compute $/h")
    if snapshot.storage_usd_per_hour is None:
        unknown.append("storage $/h")
    if snapshot.state in (InstanceState.RUNNING, InstanceState.STARTING) and not (
        snapshot.has_ssh_endpoint
    ):
        unknown.append("SSH endpoint")
    if snapshot.gpu_name is None:
        unknown.append("GPU model")
    if snapshot.gpu_count is None:
        unknown.append("GPU count")
    if snapshot.disk_gb is None:
        unknown.append("disk size")
    unknown += [f"provider field {name} (unreadable this time)" for name in snapshot.unreadable]
    return tuple(unknown)


def volume_report(volume: VolumeSnapshot) -> VolumeReport:
    fields = {"size": volume.size_gb, "$/h": volume.usd_per_hour, "attached": volume.attached}
    return VolumeReport(
        volume_id=volume.volume_id,
        name=volume.name,
        size_gb=volume.size_gb,
        usd_per_hour=volume.usd_per_hour,
        attached=volume.attached,
        unknown=tuple(name for name, value in fields.items() if value is None),
    )


def probe_summary(outcome: ProbeOutcome) -> ProbeSummary:
    """How one probe ended; ``verdict`` is busy when any sample was busy, idle when every
    sample of every GPU was idle, unknown otherwise (no samples, unreadable ones)."""
    indexes = sorted({sample.gpu_index for sample in outcome.samples})
    return ProbeSummary(
        status=outcome.status.value,
        detail=outcome.detail,
        gpus=len(indexes),
        verdict=combine_verdicts(sample.verdict for sample in outcome.samples).value,
        peak_util_percent=tuple(_peak(outcome, index) for index in indexes),
        interactive_login=outcome.interactive_login,
        reason=""
        if outcome.status is ProbeStatus.OK
        else probe_reason(outcome.status.value, outcome.detail),
    )


def _peak(outcome: ProbeOutcome, gpu_index: int) -> float | None:
    """The highest SM utilisation GPU ``gpu_index`` showed in the probe (None: never read)."""
    values = [s.sm for s in outcome.samples if s.gpu_index == gpu_index and s.sm is not None]
    return max(values, default=None)


def instance_report(
    snapshot: InstanceSnapshot, probe: ProbeOutcome | None, not_probed: str
) -> InstanceReport:
    summary = probe_summary(probe) if probe is not None else None
    unknown = list(instance_unknowns(snapshot))
    if summary is not None:
        unknown += _activity_unknown(summary)
    return InstanceReport(
        instance_id=snapshot.instance_id,
        name=snapshot.name,
        raw_state=snapshot.raw_state,
        state=snapshot.state.value,
        interruptible=snapshot.interruptible,
        compute_usd_per_hour=snapshot.compute_usd_per_hour,
        storage_usd_per_hour=snapshot.storage_usd_per_hour,
        billed_usd_per_hour=billed_usd_per_hour(
            snapshot.state, snapshot.compute_usd_per_hour, snapshot.storage_usd_per_hour
        ),
        ssh_endpoint=_endpoint(snapshot),
        gpu=_gpu_text(snapshot),
        probe=summary,
        not_probed="" if summary is not None else not_probed,
        unknown=tuple(unknown),
    )


def _endpoint(snapshot: InstanceSnapshot) -> str | None:
    """``user@host:port`` of the instance's SSH endpoint, when it has one."""
    if not snapshot.has_ssh_endpoint:
        return None
    user = f"{snapshot.ssh_user}@" if snapshot.ssh_user else ""
    return f"{user}{snapshot.ssh_host}:{snapshot.ssh_port}"


def _gpu_text(snapshot: InstanceSnapshot) -> str | None:
    """``2× A100``, with ``?`` and ``unknown GPU`` for what the provider did not say."""
    if snapshot.gpu_name is None and snapshot.gpu_count is None:
        return None
    count = f"{snapshot.gpu_count}× " if snapshot.gpu_count is not None else "?× "
    return count + (snapshot.gpu_name or "unknown GPU")


def _activity_unknown(summary: ProbeSummary) -> list[str]:
    """Why the probe left the GPU activity unknown (nothing when it read it)."""
    if summary.status != ProbeStatus.OK.value:
        return [f"GPU activity (probe {summary.status})"]
    if summary.verdict == Verdict.UNKNOWN.value:
        return ["GPU activity (no readable sample)"]
    return []


def account_report(
    name: str,
    provider: str,
    observation: AccountObservation | None,
    *,
    error_kind: str | None = None,
    error: str = "",
    probes: Mapping[str, ProbeOutcome] | None = None,
    not_probed: str = "",
    gpu_evidence: str = "",
) -> AccountReport:
    """One account's part of the report. ``observation`` is None when the listing failed
    (``error_kind``/``error`` say how); ``probes`` maps instance ids to their probe outcome and
    ``not_probed`` says why a running instance has none (no SSH key, probe disabled)."""
    if observation is None:
        return AccountReport(
            name,
            provider,
            key_check(provider, error_kind, error, {}),
            capabilities=capability_notes(provider),
            gpu_evidence=gpu_evidence,
            not_offered=not_offered(provider),
        )
    outcomes = probes or {}
    snapshot = observation.account
    instances = tuple(
        instance_report(
            instance, outcomes.get(instance.instance_id), _why_not(instance, not_probed)
        )
        for instance in sorted(observation.instances, key=lambda i: i.instance_id)
    )
    unknown = list(account_unknowns(snapshot))
    unknown += [f"{part} (failed: {why})" for part, why in sorted(observation.problems.items())]
    return AccountReport(
        name=name,
        provider=provider,
        key=key_check(provider, None, "", observation.problems),
        balance_usd=snapshot.balance_usd,
        spend_usd_per_hour=snapshot.spend_usd_per_hour,
        spend_limit_usd_per_hour=snapshot.spend_limit_usd_per_hour,
        autopay_enabled=snapshot.autopay_enabled,
        instances=instances,
        volumes=tuple(volume_report(v) for v in sorted(observation.volumes, key=_volume_id)),
        problems=dict(observation.problems),
        unknown=tuple(unknown),
        capabilities=capability_notes(provider),
        gpu_evidence=gpu_evidence,
        not_offered=not_offered(provider),
    )


def _volume_id(volume: VolumeSnapshot) -> str:
    return volume.volume_id


def _why_not(snapshot: InstanceSnapshot, not_probed: str) -> str:
    if snapshot.state is not InstanceState.RUNNING:
        return f"not running ({snapshot.state.value})"
    if not snapshot.has_ssh_endpoint:
        return "no SSH endpoint listed"
    return not_probed or "not probed"


def rule_verdicts(decisions: Sequence[Decision]) -> tuple[RuleVerdict, ...]:
    """The planner's decisions as report lines, the soonest due first."""
    verdicts = [
        RuleVerdict(
            rule=decision.finding.rule,
            subject=decision.finding.subject,
            action=decision.finding.action.value,
            status=decision.status.value,
            dry_run=decision.dry_run,
            due_at=decision.finding.due_at,
            summary=decision.finding.summary,
            note=decision.note,
        )
        for decision in decisions
    ]
    return tuple(sorted(verdicts, key=lambda v: (v.due_at, v.rule, v.subject)))
