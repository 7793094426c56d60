"""What each provider's API can do, declared once (pure: the config checks read it without
loading the HTTP adapters; each adapter class points at its entry).

Sources are in docs/providers.md: Lambda has no stop ("Instances can only be launched,
restarted or terminated"), no spot product and no balance endpoint; RunPod and Vast stop
instances, rent interruptible ones and report a balance.
"""

from __future__ import annotations

import re
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
    # The ids a stop/destroy call accepts (they go into URLs and GraphQL text): the adapters
    # refuse any other, and scenario validation refuses what the adapters would.
    instance_id: re.Pattern[str] = re.compile(r"[A-Za-z0-9]{1,64}")
    instance_id_example: str = ""
    # The account facts the API reports at all (``ACCOUNT_FACTS``): one it never offers is no
    # read failure, and doctor lists it apart from what it could not read.
    account_facts: frozenset[str] = frozenset()

    def accepts_instance_id(self, instance_id: str) -> bool:
        """Whether ``instance_id`` is an id of this provider's instances (the whole text)."""
        return self.instance_id.fullmatch(instance_id) is not None

    def describe_instance_id(self) -> str:
        """What an id of this provider looks like, for error messages."""
        return f"{self.display_name} instance ids are {self.instance_id_example}"


# The account facts a provider may report, in doctor's words.
BALANCE, SPEND_RATE, SPEND_LIMIT, AUTOPAY = "balance", "spend $/h", "spend limit", "auto-pay"
ACCOUNT_FACTS = (BALANCE, SPEND_RATE, SPEND_LIMIT, AUTOPAY)


CAPABILITIES: Mapping[str, Capabilities] = {
    "vast": Capabilities(
        "Vast.ai",
        can_stop=True,
        interruptible=True,
        balance=True,
        gpu_utilisation=False,
        instance_id=re.compile(r"[0-9]{1,20}"),
        instance_id_example="integers of at most 20 digits, e.g. '9001'",
        # /users/current has credit and the auto top-up settings, no spend rate or limit
        account_facts=frozenset({BALANCE, AUTOPAY}),
    ),
    "runpod": Capabilities(
        "RunPod",
        can_stop=True,
        interruptible=True,
        balance=True,
        gpu_utilisation=True,
        balance_spendable=True,  # clientBalance, as runpodctl's `user` shows it
        instance_id=re.compile(r"[A-Za-z0-9]{1,64}"),
        instance_id_example="1-64 letters and digits, e.g. 'abc123xyz'",
        # myself { clientBalance currentSpendPerHr spendLimit }: nothing about auto-pay
        account_facts=frozenset({BALANCE, SPEND_RATE, SPEND_LIMIT}),
    ),
    "lambda": Capabilities(
        "Lambda",
        can_stop=False,
        interruptible=False,
        balance=False,
        gpu_utilisation=False,
        instance_id=re.compile(r"[A-Za-z0-9_-]{1,64}"),
        instance_id_example="1-64 letters, digits, '_' and '-', e.g. '0920b6b1a2c34d5e'",
    ),
}
