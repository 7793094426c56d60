"""Every documented state of each provider, as the simulated world plays it.

A scenario event may set ``provider_state`` (the provider's own spelling: Vast ``"loading"``,
RunPod ``"RESTARTING"``, Lambda ``"unhealthy"``) instead of the generic ``state``. The world then
bills the items that state bills, the probe reaches the instance only where the container runs,
and each dialect shows the state exactly (Vast's ``actual_status`` with its ``intended_status``,
``cur_state`` and ``next_state``; RunPod's ``desiredStatus`` with ``runtime`` null or present;
Lambda's ``status``). The billing follows docs/providers.md; where a provider does not document
a state's billing the table states the simulator's assumption (``documented=False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

BaseState = Literal["starting", "running", "paused", "stopped"]


@dataclass(frozen=True, slots=True)
class ProviderState:
    """One provider state: the world's base state and what it bills and allows.

    ``base`` drives the world's bookkeeping (which API calls apply, the zero-balance
    behaviour); ``compute``/``storage`` say what bills; ``reachable`` whether SSH answers;
    ``runtime`` whether a RunPod pod shows its runtime block; ``documented`` whether the
    billing comes from the provider's documentation (else it is the simulator's assumption);
    ``by_provider`` whether the provider put it there itself while its user still wants it
    running (Vast's stop at a zero balance or for a host fault), ``detail`` what the provider
    says about it (Vast's ``status_msg``).
    """

    provider: str
    name: str
    base: BaseState
    compute: bool
    storage: bool
    reachable: bool
    runtime: bool = False
    documented: bool = True
    by_provider: bool = False
    detail: str | None = None


def _table(provider: str, *states: ProviderState) -> Mapping[str, ProviderState]:
    assert all(state.provider == provider for state in states)
    return {state.name: state for state in states}


def _vast(name: str, base: BaseState, *flags: bool, documented: bool = True) -> ProviderState:
    compute, storage, reachable = flags
    return ProviderState("vast", name, base, compute, storage, reachable, documented=documented)


def _runpod(
    name: str, base: BaseState, *flags: bool, runtime: bool = False, documented: bool = True
) -> ProviderState:
    compute, storage, reachable = flags
    return ProviderState(
        "runpod", name, base, compute, storage, reachable, runtime, documented=documented
    )


def _lambda(name: str, base: BaseState, *flags: bool, documented: bool = True) -> ProviderState:
    compute, storage, reachable = flags
    return ProviderState("lambda", name, base, compute, storage, reachable, documented=documented)


# (compute billed, storage billed, SSH reachable)
PROVIDER_STATES: Mapping[str, Mapping[str, ProviderState]] = {
    "vast": _table(
        "vast",
        _vast("null", "starting", False, True, False),
        _vast("created", "starting", False, True, False),
        _vast("loading", "starting", False, True, False),
        _vast("scheduling", "starting", False, True, False),
        _vast("running", "running", True, True, True),
        _vast("stopped", "stopped", False, True, False),
        # The container died; cur_state stays "running": the contract keeps (and bills) its
        # GPU. Vast's docs are silent on the GPU charge: the simulator's assumption.
        _vast("exited", "running", True, True, False, documented=False),
        _vast("frozen", "running", True, True, False),
        _vast("rebooting", "starting", True, True, False, documented=False),
        _vast("offline", "stopped", False, False, False),
        _vast("unknown", "running", True, True, False, documented=False),
    ),
    "runpod": _table(
        "runpod",
        _runpod("CREATED", "starting", True, True, False, documented=False),
        _runpod("RUNNING", "running", True, True, True, runtime=True),
        _runpod("RESTARTING", "starting", True, True, False, documented=False),
        _runpod("EXITED", "stopped", False, True, False),
        _runpod("PAUSED", "stopped", False, True, False, documented=False),
        _runpod("DEAD", "stopped", False, True, False, documented=False),
        _runpod("TERMINATED", "stopped", False, False, False),
    ),
    "lambda": _table(
        "lambda",
        # Lambda's price includes the local disk: "storage" is whatever the scenario gives the
        # instance (normally nothing), billed while the VM exists.
        _lambda("booting", "starting", False, True, False),
        _lambda("active", "running", True, True, True),
        # Failed Lambda's health checks; the VM itself may still answer SSH (the simulator's
        # assumption): a probe then reads its GPUs, idle or not.
        _lambda("unhealthy", "running", True, True, True),
        _lambda("terminating", "stopped", False, False, False),
        _lambda("terminated", "stopped", False, False, False),
        _lambda("preempted", "stopped", False, False, False, documented=False),
    ),
}

# Vast stops a running instance itself when the account's credit reaches zero (docs/providers.md,
# "Vast.ai": zero balance): the GPU is released, the disk keeps billing, and its user's
# ``intended_status`` stays "running".
VAST_STOPPED_BY_VAST = ProviderState(
    "vast", "stopped", "stopped", False, True, False, by_provider=True
)

# RunPod shows ``RUNNING`` with ``runtime: null`` while the container starts (or never comes
# up): the pod is rented and bills, the probe finds nothing.
RUNPOD_RUNNING_WITHOUT_RUNTIME = ProviderState(
    "runpod", "RUNNING", "starting", True, True, False, runtime=False
)


def provider_state(provider: str, name: str, *, runtime: bool | None = None) -> ProviderState:
    """The state ``name`` of ``provider`` (``KeyError`` when it is not one of its states);
    ``runtime`` (RunPod only) overrides whether a ``RUNNING`` pod shows its runtime."""
    state = PROVIDER_STATES[provider][name]
    if provider == "runpod" and name == "RUNNING" and runtime is False:
        return RUNPOD_RUNNING_WITHOUT_RUNTIME
    return state


def scripted_state(
    provider: str,
    state: str | None,
    name: str | None,
    runtime: bool | None,
    status_msg: str | None = None,
) -> tuple[str, ProviderState | None] | None:
    """What an event scripts: ``(base state, provider state)``; ``None`` when it scripts no
    state change (a ``name`` that is not one of ``provider``'s states only changes what the
    listing shows: :func:`unmapped_state`). ``state`` and ``name`` exclude each other; a
    ``status_msg`` (Vast ``stopped``) makes it a stop the provider made itself, saying why."""
    if name is not None and name in PROVIDER_STATES[provider]:
        exact = provider_state(provider, name, runtime=runtime)
        if status_msg is not None:
            exact = replace(exact, by_provider=True, detail=status_msg, documented=False)
        return exact.base, exact
    if state is not None:
        return state, None
    return None


def unmapped_state(provider: str, state: str, raw: str) -> ProviderState:
    """A raw state no table maps, shown instead of the usual one while the instance keeps the
    billing of its scripted ``state``."""
    usual = generic_billing(provider, state)
    if usual is None:
        return ProviderState(provider, raw, "stopped", False, False, False, documented=False)
    return ProviderState(
        provider,
        raw,
        usual.base,
        usual.compute,
        usual.storage,
        usual.reachable,
        usual.runtime,
        documented=False,
    )


# How each generic scripted state shows and bills on each provider when a scenario does not name
# the provider's state: Vast loads (no GPU billed yet), RunPod shows RUNNING without a runtime
# (billed), Lambda boots (not billed before its health checks pass).
_GENERIC: Mapping[tuple[str, str], ProviderState] = {
    ("vast", "starting"): PROVIDER_STATES["vast"]["loading"],
    ("vast", "running"): PROVIDER_STATES["vast"]["running"],
    ("vast", "paused"): PROVIDER_STATES["vast"]["scheduling"],
    ("vast", "stopped"): PROVIDER_STATES["vast"]["stopped"],
    ("runpod", "starting"): RUNPOD_RUNNING_WITHOUT_RUNTIME,
    ("runpod", "running"): PROVIDER_STATES["runpod"]["RUNNING"],
    ("runpod", "paused"): PROVIDER_STATES["runpod"]["EXITED"],
    ("runpod", "stopped"): PROVIDER_STATES["runpod"]["EXITED"],
    ("lambda", "starting"): PROVIDER_STATES["lambda"]["booting"],
    ("lambda", "running"): PROVIDER_STATES["lambda"]["active"],
    ("lambda", "paused"): PROVIDER_STATES["lambda"]["preempted"],
}


def generic_billing(provider: str, state: str) -> ProviderState | None:
    """The provider state a generic scripted ``state`` stands for (its billing), if any."""
    return _GENERIC.get((provider, state))
