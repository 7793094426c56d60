"""hygiene: account-level risks the API can show.

Intent: a registered SSH "public key" that is not a key (a file path pasted in), an instance
exposing Jupyter or HTTP ports to the internet, or auto-pay defeating a prepaid cap. Notifies only.

```toml
[rules.hygiene]
check_ssh_keys = true
check_public_ports = true
risky_ports = [8888, 8080, 6006, 80]
check_autopay = true
```

Episodes: an issue stays one episode for as long as it lasts, so it is reported once, not every
tick. A public-port issue starts when the instance was first seen. SSH keys and auto-pay carry no
time of their own, so they use a fixed marker (``ISSUE_MARKER``, the Unix epoch) — a marker, not
a date — and each issue has its own topic (``ssh_key:ID``, ``autopay``); the flip side is that an
issue fixed and later reintroduced is not reported again.

The key check never echoes key material (someone may have pasted a private key): only the kind
of problem and, for a file path, the path.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from datetime import UTC, datetime

from pydantic import Field

from watchdog_gpu.fleet import AccountView, FleetView, InstanceView
from watchdog_gpu.model import ActionKind, Finding, InstanceState, Severity, SshKeyRecord
from watchdog_gpu.rules.base import RuleConfig, RuleSpec

NAME = "hygiene"
ISSUE_MARKER = datetime(1970, 1, 1, tzinfo=UTC)
KEY_TYPES = frozenset(
    {
        "ssh-rsa",
        "ssh-dss",
        "ssh-ed25519",
        "ssh-ed448",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
CERT_SUFFIX = "-cert-v01@openssh.com"
PATH_PREVIEW_LIMIT = 80
EXPOSED_STATES = (InstanceState.STARTING, InstanceState.RUNNING)


class HygieneConfig(RuleConfig):
    """Notify about account-level risks the API shows."""

    check_ssh_keys: bool = Field(
        default=True,
        description=(
            'A registered SSH "public key" that is not a key (e.g. a file path pasted in).'
        ),
    )
    check_public_ports: bool = Field(
        default=True, description="Instances publishing the risky ports below to the internet."
    )
    risky_ports: list[int] = Field(
        default_factory=lambda: [8888, 8080, 6006, 80],
        description="Ports that should not face the internet (Jupyter, TensorBoard, HTTP).",
    )
    check_autopay: bool = Field(
        default=True,
        description=(
            "Auto-pay or a saved card defeating a prepaid balance cap (where the API tells)."
        ),
    )


def evaluate(view: FleetView, now: datetime, config: HygieneConfig) -> list[Finding]:
    """One notify finding per issue: a registered key that is not a key, an instance publishing
    a risky port, auto-pay enabled (each check can be switched off)."""
    findings: list[Finding] = []
    if config.check_ssh_keys:
        findings.extend(_key_findings(view.ssh_keys))
    if config.check_public_ports:
        for instance in view.instances.values():
            finding = _port_finding(instance, config.risky_ports)
            if finding is not None:
                findings.append(finding)
    if config.check_autopay:
        findings.extend(_autopay_finding(account) for account in _with_autopay(view))
    return findings


def key_problem(public_key: str) -> str | None:
    """What is wrong with a registered SSH public key, or ``None`` when it looks like a key.

    Checks each non-empty line: a known key type (after optional authorized_keys options),
    followed by base64 data whose embedded type matches. Never returns key material.
    """
    lines = [line.strip() for line in public_key.splitlines() if line.strip()]
    if not lines:
        return "the key is empty"
    if "PRIVATE KEY" in public_key:
        return "a private key was registered as the public key: revoke it and register the .pub"
    for line in lines:
        problem = _line_problem(line)
        if problem is not None:
            return problem
    return None


def _line_problem(line: str) -> str | None:
    tokens = line.split()
    types = [i for i, token in enumerate(tokens) if _is_key_type(token)]
    if not types:
        if _looks_like_path(tokens[0]):
            return f"a file path was saved instead of the key: {tokens[0][:PATH_PREVIEW_LIMIT]}"
        return "it does not start with a known key type (ssh-ed25519, ssh-rsa, ecdsa-...)"
    index = types[0]
    if index + 1 >= len(tokens):
        return "the key type is not followed by key data"
    try:
        blob = base64.b64decode(tokens[index + 1], validate=True)
    except (binascii.Error, ValueError):
        return "the key data is not valid base64"
    length = int.from_bytes(blob[:4], "big")
    if blob[4 : 4 + length] != tokens[index].encode():
        return "the key data does not match its key type (truncated or mangled?)"
    return None


def _is_key_type(token: str) -> bool:
    return token in KEY_TYPES or token.endswith(CERT_SUFFIX)


def _looks_like_path(token: str) -> bool:
    return token.startswith(("~", "/", "./", "C:\\")) or "/" in token or token.endswith(".pub")


def _key_findings(keys: tuple[SshKeyRecord, ...]) -> Iterator[Finding]:
    for key in keys:
        problem = key_problem(key.public_key)
        if problem is None:
            continue
        yield Finding(
            rule=NAME,
            account=key.account,
            instance_id=None,
            severity=Severity.WARNING,
            action=ActionKind.NOTIFY,
            summary=f"registered SSH key {key.name!r} is not a usable public key: {problem}",
            episode_started_at=ISSUE_MARKER,
            due_at=ISSUE_MARKER,
            evidence={"key_id": key.key_id, "key_name": key.name, "problem": problem},
            topic=f"ssh_key:{key.key_id}",
        )


def _port_finding(instance: InstanceView, risky_ports: list[int]) -> Finding | None:
    if instance.state not in EXPOSED_STATES:
        return None
    exposed = sorted(set(instance.latest.public_ports) & set(risky_ports))
    if not exposed:
        return None
    ports = ", ".join(str(port) for port in exposed)
    return Finding(
        rule=NAME,
        account=instance.latest.account,
        instance_id=instance.latest.instance_id,
        severity=Severity.WARNING,
        action=ActionKind.NOTIFY,
        summary=f"publishes port(s) {ports} to the internet (Jupyter, TensorBoard or HTTP?)",
        episode_started_at=instance.first_seen,
        due_at=instance.first_seen,
        evidence={"instance_name": instance.latest.name, "ports": ports},
        topic="public_ports",
    )


def _with_autopay(view: FleetView) -> Iterator[AccountView]:
    for account in view.accounts.values():
        if account.latest is not None and account.latest.autopay_enabled is True:
            yield account


def _autopay_finding(account: AccountView) -> Finding:
    return Finding(
        rule=NAME,
        account=account.account,
        instance_id=None,
        severity=Severity.INFO,
        action=ActionKind.NOTIFY,
        summary=(
            "auto-pay is enabled: the provider tops the balance up, so a prepaid balance no "
            "longer caps what a runaway can spend"
        ),
        episode_started_at=ISSUE_MARKER,
        due_at=ISSUE_MARKER,
        evidence={"provider": account.provider},
        topic="autopay",
    )


RULE = RuleSpec(NAME, HygieneConfig, evaluate)
