"""Loading the daemon's private key(s) and small host-key helpers.

The key can come from a file (e.g. ``$CREDENTIALS_DIRECTORY/ssh_private_key`` under systemd's
``LoadCredential=``) or from a secret's text (never written to disk); an encrypted key takes its
passphrase from a secret. Error messages name the source and the problem, never key material or
the passphrase: paramiko's and cryptography's own messages are not passed on, because some of them
carry the key bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from watchdog_gpu.errors import ConfigError, ConfigProblem
from watchdog_gpu.probe.paramiko_lean import paramiko


@dataclass(frozen=True, slots=True)
class SshCredentials:
    """Which private key(s) the probe offers. At least one source must be set.

    ``private_key_path``: an OpenSSH or PEM private key file. ``private_key_text``: the same
    content from a secret. ``passphrase``: for an encrypted key (ignored for a plain one).
    ``use_agent``: also offer the keys of the ssh-agent at ``$SSH_AUTH_SOCK``. ``where``: the
    configuration's dotted path of these settings, which problems are reported under
    (``accounts[0].ssh``).
    """

    private_key_path: Path | None = None
    private_key_text: str | None = field(default=None, repr=False)
    passphrase: str | None = field(default=None, repr=False)
    use_agent: bool = False
    where: str = "ssh"


def load_private_keys(credentials: SshCredentials) -> list[paramiko.PKey]:
    """The private keys named by ``credentials``, decrypted and ready to offer.

    Raises :class:`ConfigError` (under the configuration's own keys: ``<where>.key_file`` /
    ``<where>.private_key``) when a key cannot be read, is not a private key, is of an
    unsupported type or the passphrase is wrong, and when no source is configured at all.
    """
    sources, problems = _key_sources(credentials)
    keys: list[paramiko.PKey] = []
    for where, data in sources:
        try:
            keys.append(_load_key(data, credentials.passphrase))
        except _KeyProblem as problem:
            problems.append(ConfigProblem(where, str(problem)))
    if not sources and not problems and not credentials.use_agent:
        problems.append(
            ConfigProblem(credentials.where, "no private key configured and the agent is off")
        )
    if problems:
        raise ConfigError(problems)
    return keys


def _key_sources(
    credentials: SshCredentials,
) -> tuple[list[tuple[str, bytes]], list[ConfigProblem]]:
    """The configured keys' bytes, each with the configuration key it came from, and the
    problem of a key file that cannot be read."""
    sources: list[tuple[str, bytes]] = []
    problems: list[ConfigProblem] = []
    if credentials.private_key_path is not None:
        key_file = f"{credentials.where}.key_file"
        try:
            sources.append((key_file, credentials.private_key_path.read_bytes()))
        except OSError as exc:
            problems.append(ConfigProblem(key_file, f"cannot read the key file: {exc.strerror}"))
    if credentials.private_key_text is not None:
        sources.append((f"{credentials.where}.private_key", credentials.private_key_text.encode()))
    return sources, problems


class _KeyProblem(Exception):
    pass


def _load_key(data: bytes, passphrase: str | None) -> paramiko.PKey:
    password = passphrase.encode() if passphrase else None
    try:
        loaded = _decode(data, password)
    except TypeError:
        # A passphrase was configured for a key that is not encrypted (or the other way round).
        if password is None:
            raise _KeyProblem("the key is encrypted and no passphrase is configured") from None
        loaded = _decode(data, None)
    key_class: type[paramiko.PKey]
    if not isinstance(
        loaded, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    ):
        raise _KeyProblem("unsupported key type (use ed25519, ecdsa or rsa)")
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        key_class = paramiko.Ed25519Key
    elif isinstance(loaded, rsa.RSAPrivateKey):
        key_class = paramiko.RSAKey
    else:
        key_class = paramiko.ECDSAKey
    # paramiko reads only some containers (not PKCS#8): hand it the decoded key re-written as an
    # unencrypted OpenSSH key, in memory only.
    openssh = loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    try:
        return key_class.from_private_key(io.StringIO(openssh.decode()))
    except (paramiko.SSHException, ValueError):
        raise _KeyProblem("paramiko could not load the key") from None


def _decode(data: bytes, password: bytes | None) -> object:
    """The cryptography key object; raises TypeError on an encryption mismatch."""
    try:
        return serialization.load_ssh_private_key(data, password=password)
    except ValueError as ssh_error:
        if b"OPENSSH PRIVATE KEY" in data:
            raise _KeyProblem(_explain(ssh_error, password)) from None
    try:
        return serialization.load_pem_private_key(data, password=password)
    except ValueError as pem_error:
        # An encrypted PEM decrypted with a wrong passphrase is garbage that usually fails its
        # padding ("bad decrypt") but now and then only its parse ("Could not deserialize").
        encrypted = b"ENCRYPTED" in data
        raise _KeyProblem(_explain(pem_error, password, encrypted=encrypted)) from None


def _explain(error: ValueError, password: bytes | None, *, encrypted: bool = False) -> str:
    # cryptography says "Incorrect password", "Corrupt data: broken checksum" (a wrong passphrase
    # on an OpenSSH key), "Could not deserialize"…; only our own words go on, so no part of a key
    # can reach a log.
    text = str(error).lower()
    said = any(word in text for word in ("password", "checksum", "decrypt"))
    if password is not None and (said or encrypted):
        return "wrong passphrase, or the key is damaged"
    return "not a private key in OpenSSH or PEM format"


def fingerprint(key_base64: str) -> str:
    """OpenSSH's ``SHA256:…`` fingerprint of a public key given as base64 (``ssh-keygen -l``)."""
    try:
        blob = base64.b64decode(key_base64, validate=True)
    except ValueError:
        return "SHA256:?"
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def prefer_key_type(preferred: tuple[str, ...], key_type: str) -> tuple[str, ...]:
    """``preferred`` host-key algorithms with those that produce ``key_type`` moved first.

    An RSA key is named ``ssh-rsa`` but negotiated as ``rsa-sha2-512``/``rsa-sha2-256``.
    """
    wanted = ("rsa-sha2-512", "rsa-sha2-256") if key_type == "ssh-rsa" else (key_type,)
    first = tuple(name for name in preferred if name in wanted)
    return first + tuple(name for name in preferred if name not in wanted)
