"""What each account's GPU evidence can prove: the one place that decides it.

dmon rows prove a GPU idle or busy; a provider's point reading proves busy but not idle, unless
the account opts in with ``idle_evidence = "provider_api"``. ``config check``, ``doctor``,
``status`` and the rules all read :class:`AccountEvidence` (:func:`account_evidence`), so they
say the same thing: ``docs/safety.md``, "Evidence strength".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from watchdog_gpu.capabilities import CAPABILITIES
from watchdog_gpu.model import SampleSource


class IdleEvidence(StrEnum):
    """What may prove an account's GPUs idle (the account's ``idle_evidence``)."""

    SSH = "ssh"  # only the probe's rows over SSH (the default)
    PROVIDER_API = "provider_api"  # the provider's utilisation figure too (opt-in)


OPT_IN = f'idle_evidence = "{IdleEvidence.PROVIDER_API.value}"'


@dataclass(frozen=True, slots=True)
class AccountEvidence:
    """One account's sources of GPU evidence and what each can prove."""

    account: str
    provider: str
    ssh: bool  # the probe can log in (a key configured and the probe enabled)
    provider_reading: bool  # the provider's API reports per-GPU utilisation (RunPod)
    reading_proves_idle: bool  # idle_evidence = "provider_api"

    def proves_idle(self, source: SampleSource) -> bool:
        """Whether an idle sample from ``source`` counts as observed idle time."""
        return source is not SampleSource.PROVIDER_API or self.reading_proves_idle

    @property
    def judged_idle(self) -> bool:
        """Whether this account's instances can be judged idle at all."""
        return self.ssh or (self.provider_reading and self.reading_proves_idle)

    @property
    def summary(self) -> str:
        """One line for ``config check``, ``doctor`` and ``status``."""
        name = CAPABILITIES[self.provider].display_name if self.provider in CAPABILITIES else ""
        reading = f"{name}'s per-poll utilisation figure"
        if self.provider_reading and self.reading_proves_idle:
            head = "SSH probe (dmon) and " if self.ssh else "no SSH probe; "
            return (
                f"{head}{reading} may prove idle ({OPT_IN}): a GPU busy in short bursts "
                "between polls can be judged idle and destroyed"
            )
        if self.ssh and self.provider_reading:
            return (
                f"SSH probe (dmon) proves idle and busy; {reading} proves busy only "
                "(judged idle on SSH data alone)"
            )
        if self.ssh:
            return "SSH probe (dmon) proves idle and busy"
        if self.provider_reading:
            return (
                f"no SSH probe: only {reading}, which proves busy, never idle; its instances "
                "are never destroyed as idle (an alert instead; budget and time limits still "
                f"act) unless the account sets {OPT_IN}"
            )
        return (
            "no SSH probe and no utilisation from the API: its instances stay unobserved "
            "(never judged idle; budget and time limits still act)"
        )


def account_evidence(
    account: str, provider: str, *, ssh: bool, idle_evidence: str = IdleEvidence.SSH.value
) -> AccountEvidence:
    """The evidence an account's instances have: ``ssh`` when the probe can log in to them,
    the provider's reading when its API reports utilisation, and whether that reading may
    prove idle (``idle_evidence``)."""
    caps = CAPABILITIES.get(provider)
    reading = caps is not None and caps.gpu_utilisation
    return AccountEvidence(
        account=account,
        provider=provider,
        ssh=ssh,
        provider_reading=reading,
        reading_proves_idle=reading and idle_evidence == IdleEvidence.PROVIDER_API.value,
    )


def default_evidence(account: str, provider: str) -> AccountEvidence:
    """An account nothing was said about (a view built by hand): the strict default, SSH
    assumed and the provider's reading proving busy only."""
    return account_evidence(account, provider, ssh=True)


EVIDENCE_WEAK = "weak_evidence"
"""The evidence key of a finding that only evidence which cannot prove idle supports (idle_gpu's
"looks idle per the provider" alert): the message says so and names the opt-in."""
