"""hygiene: keys that are not keys, risky public ports, auto-pay; one finding per issue."""

from __future__ import annotations

import base64

import pytest

from tests.unit.rules.builders import account_view, at, fleet, instance, running, span, ssh_key
from watchdog_gpu.model import InstanceState, Severity
from watchdog_gpu.rules.hygiene import HygieneConfig, evaluate, key_problem

CONFIG = HygieneConfig()


def real_key(kind: str = "ssh-ed25519") -> str:
    blob = len(kind).to_bytes(4, "big") + kind.encode() + b"\x00\x00\x00\x20" + b"k" * 32
    return f"{kind} {base64.b64encode(blob).decode()} me@laptop"


def private_key(body: str) -> str:
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (real_key(), None),
        (real_key("ssh-rsa"), None),
        (real_key("ecdsa-sha2-nistp256"), None),
        ('no-pty,command="x" ' + real_key(), None),
        (real_key() + "\n" + real_key("ssh-rsa") + "\n", None),
        ("~/.ssh/id_rsa.pub", "a file path was saved instead of the key: ~/.ssh/id_rsa.pub"),
        ("/home/me/.ssh/id_ed25519.pub", "a file path"),
        ("", "the key is empty"),
        ("hello world", "does not start with a known key type"),
        ("ssh-ed25519", "not followed by key data"),
        ("ssh-rsa ~/.ssh/id_rsa.pub", "not valid base64"),
        ("ssh-rsa " + real_key().split()[1], "does not match its key type"),
        (
            private_key("b3BlbnNzaC1rZXk"),
            "a private key",
        ),
    ],
)
def test_key_problems(text: str, problem: str | None) -> None:
    found = key_problem(text)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_a_private_key_is_reported_without_echoing_it() -> None:
    secret = private_key("c2VjcmV0LW1hdGVyaWFs")
    view = fleet(at(0), ssh_keys=[ssh_key("k1", secret)])
    (finding,) = evaluate(view, at(0), CONFIG)
    assert "c2VjcmV0" not in repr(finding)


def test_each_bad_key_is_its_own_stable_issue() -> None:
    keys = [ssh_key("k1", "~/.ssh/id_rsa.pub"), ssh_key("k2", "oops"), ssh_key("k3", real_key())]
    first = evaluate(fleet(at(0), ssh_keys=keys), at(0), CONFIG)
    later = evaluate(fleet(at(600), ssh_keys=keys), at(600), CONFIG)
    assert [f.evidence["key_id"] for f in first] == ["k1", "k2"]
    assert [f.episode_key for f in first] == [f.episode_key for f in later]
    assert len({f.episode_key for f in first}) == 2
    assert all(f.instance_id is None for f in first)


def test_risky_public_ports_on_a_running_instance() -> None:
    exposed = running(at(0), at(60), public_ports=(22, 8888, 6006))
    (finding,) = evaluate(fleet(at(60), exposed), at(60), CONFIG)
    assert finding.instance_id == "9001"
    assert finding.evidence["ports"] == "6006, 8888"
    assert finding.episode_started_at == at(0)


def test_ssh_alone_or_a_stopped_instance_is_fine() -> None:
    ssh_only = running(at(0), at(60), public_ports=(22,), instance_id="1")
    stopped = instance(
        span(InstanceState.STOPPED, at(0), at(60)), public_ports=(8888,), instance_id="2"
    )
    assert evaluate(fleet(at(60), ssh_only, stopped), at(60), CONFIG) == []


def test_autopay_is_an_info_finding() -> None:
    accounts = [account_view("vast-main", autopay=True), account_view("rp", autopay=False)]
    (finding,) = evaluate(fleet(at(0), accounts=accounts), at(0), CONFIG)
    assert finding.severity is Severity.INFO
    assert finding.subject == "vast-main[autopay]"


def test_each_check_can_be_switched_off() -> None:
    view = fleet(
        at(60),
        running(at(0), at(60), public_ports=(8888,)),
        accounts=[account_view(autopay=True)],
        ssh_keys=[ssh_key("k1", "~/.ssh/id_rsa.pub")],
    )
    assert len(evaluate(view, at(60), CONFIG)) == 3
    off = HygieneConfig(check_ssh_keys=False, check_public_ports=False, check_autopay=False)
    assert evaluate(view, at(60), off) == []
