"""Loading the probe's private keys: every source, every mistake named, no secret in a message."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from watchdog_gpu.errors import ConfigError
from watchdog_gpu.probe.sshkeys import (
    SshCredentials,
    fingerprint,
    load_private_keys,
    prefer_key_type,
)

PASSPHRASE = "correct horse battery"
PrivateKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def openssh_text(key: PrivateKey, passphrase: str | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption
    ).decode()


def pem_text(key: PrivateKey, passphrase: str | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


@pytest.mark.parametrize(
    ("key", "name"),
    [
        (ed25519.Ed25519PrivateKey.generate(), "ssh-ed25519"),
        (rsa.generate_private_key(public_exponent=65537, key_size=2048), "ssh-rsa"),
        (ec.generate_private_key(ec.SECP256R1()), "ecdsa-sha2-nistp256"),
    ],
)
def test_a_key_file_of_each_supported_type_loads(
    key: PrivateKey, name: str, tmp_path: Path
) -> None:
    path = tmp_path / "key"
    path.write_text(openssh_text(key))

    (loaded,) = load_private_keys(SshCredentials(private_key_path=path))

    assert loaded.get_name() == name


def test_an_encrypted_pem_key_from_a_secret_loads_with_its_passphrase() -> None:
    text = pem_text(rsa.generate_private_key(public_exponent=65537, key_size=2048), PASSPHRASE)

    (loaded,) = load_private_keys(SshCredentials(private_key_text=text, passphrase=PASSPHRASE))

    assert loaded.get_name() == "ssh-rsa"


def test_a_passphrase_for_a_plain_key_is_ignored() -> None:
    text = openssh_text(ed25519.Ed25519PrivateKey.generate())

    assert len(load_private_keys(SshCredentials(private_key_text=text, passphrase="x"))) == 1


# An encrypted test key (passphrase "right passphrase") that the wrong passphrase "wrong-212"
# decrypts into garbage with valid padding: only its parse fails ("Could not deserialize"), as
# about one wrong passphrase in 256 does.
PARSE_FAILS_KEY = """-----BEGIN ENCRYPTED PRIVATE KEY-----
MIGjMF8GCSqGSIb3DQEFDTBSMDEGCSqGSIb3DQEFDDAkBBCd7lL3bLcKe11i+DvO
i7WhAgIIADAMBggqhkiG9w0CCQUAMB0GCWCGSAFlAwQBKgQQQYS3WuVB1EsTvhNg
M53pOARAfLY1RjQfkBzfgbQmMZqxmpU+5lE6xq8T9dKuuiEWkBDo/KpHg44lgDJh
XzXOb5A4157B9WFPQGb2mCU5cecxPw==
-----END ENCRYPTED PRIVATE KEY-----
"""


def test_a_wrong_passphrase_that_only_fails_the_parse_is_still_a_wrong_passphrase() -> None:
    credentials = SshCredentials(private_key_text=PARSE_FAILS_KEY, passphrase="wrong-212")
    with pytest.raises(ConfigError) as failure:
        load_private_keys(credentials)

    assert str(failure.value) == "ssh.private_key: wrong passphrase, or the key is damaged"
    loaded = load_private_keys(
        SshCredentials(private_key_text=PARSE_FAILS_KEY, passphrase="right passphrase")
    )
    assert len(loaded) == 1


@pytest.mark.parametrize("writer", [openssh_text, pem_text])
def test_a_wrong_passphrase_is_named_and_never_echoed(writer: object) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    text = writer(key, PASSPHRASE)  # type: ignore[operator]

    with pytest.raises(ConfigError) as failure:
        load_private_keys(SshCredentials(private_key_text=text, passphrase="wrong guess 123"))

    message = str(failure.value)
    assert message == "ssh.private_key: wrong passphrase, or the key is damaged"
    assert "wrong guess 123" not in message
    assert PASSPHRASE not in message


def test_an_encrypted_key_without_a_passphrase_says_so(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(openssh_text(ed25519.Ed25519PrivateKey.generate(), PASSPHRASE))

    with pytest.raises(ConfigError, match="encrypted and no passphrase"):
        load_private_keys(SshCredentials(private_key_path=path))


def test_a_public_key_or_garbage_is_not_a_private_key(tmp_path: Path) -> None:
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    path = tmp_path / "key.pub"
    path.write_bytes(line)

    with pytest.raises(ConfigError) as failure:
        load_private_keys(SshCredentials(private_key_path=path, private_key_text="AAAAsecret"))

    assert [problem.path for problem in failure.value.problems] == [
        "ssh.key_file",
        "ssh.private_key",
    ]
    assert "AAAAsecret" not in str(failure.value)
    assert line.decode().split()[1] not in str(failure.value)


def test_a_missing_key_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssh.key_file: cannot read the key file"):
        load_private_keys(SshCredentials(private_key_path=tmp_path / "absent"))


def test_no_key_and_no_agent_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="no private key configured"):
        load_private_keys(SshCredentials())


def test_the_agent_alone_needs_no_key() -> None:
    assert load_private_keys(SshCredentials(use_agent=True)) == []


def test_the_credentials_repr_hides_the_secrets() -> None:
    credentials = SshCredentials(private_key_text="-----BEGIN", passphrase=PASSPHRASE)

    assert "BEGIN" not in repr(credentials)
    assert PASSPHRASE not in repr(credentials)


def test_fingerprints_are_openssh_sha256() -> None:
    text = openssh_text(ed25519.Ed25519PrivateKey.generate())
    (key,) = load_private_keys(SshCredentials(private_key_text=text))

    assert fingerprint(key.get_base64()) == key.fingerprint
    assert fingerprint("not base64!") == "SHA256:?"


def test_the_pinned_key_type_is_asked_for_first() -> None:
    offered = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256")

    assert prefer_key_type(offered, "ecdsa-sha2-nistp256")[0] == "ecdsa-sha2-nistp256"
    assert prefer_key_type(offered, "ssh-rsa")[:2] == ("rsa-sha2-512", "rsa-sha2-256")
    assert sorted(prefer_key_type(offered, "ssh-rsa")) == sorted(offered)
