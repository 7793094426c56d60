"""What each provider's API can do, declared once (pure: the config checks read it without
loading the HTTP adapters; each adapter class points at its entry).

Sources are in docs/providers.md: Lambda has no stop ("Instances can only be launched,
restarted or terminated"), no spot product and no balance endpoint; RunPod and Vast stop
instances, rent interruptible ones and report a balance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One provider's abilities, as the rules, the config checks and ``doctor`` need them."""

    display_name: str
    can_stop: bool  # an instance can be stopped (GPU released, disk kept)
    interruptible: bool  # bid/spot instances exist
    balance: bool  # the API reports a prepaid balance
    gpu_utilisation: bool  # the API reports per-GPU utilisation (an SSH-free signal)
    # The balance field is documented as the spendable prepaid balance for every kind of key.
    # Where it is not (Vast: ``credit`` vs ``balance``, and nothing says what a team key's
    # /users/current shows), a balance floor only alerts: a wrong balance must not destroy a
    # whole account (docs/providers.md, "Balances").
    balance_spendable: bool = False


CAPABILITIES: Mapping[str, Capabilities] = {
    "vast": Capabilities(
        "Vast.ai", can_stop=True, interruptible=True, balance=True, gpu_utilisation=False
    ),
    "runpod": Capabilities(
        "RunPod",
        can_stop=True,
        interruptible=True,
        balance=True,
        gpu_utilisation=True,
        balance_spendable=True,  # clientBalance, as runpodctl's `user` shows it
    ),
    "lambda": Capabilities(
        "Lambda", can_stop=False, interruptible=False, balance=False, gpu_utilisation=False
    ),
}
