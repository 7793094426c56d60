"""Secrets never survive scrubbing; ordinary data does."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog_gpu.providers.scrub import (
    REDACTED,
    scrub_decoded,
    scrub_payload,
    scrub_text,
    truncate,
)

KEY = "canary-key-5c1d9e"


def test_known_secrets_are_removed_from_any_string_anywhere_in_a_payload() -> None:
    payload = {"a": [{"b": f"prefix {KEY} suffix"}], "n": 3, "ok": True, "none": None}

    assert scrub_payload(payload, [KEY]) == {
        "a": [{"b": f"prefix {REDACTED} suffix"}],
        "n": 3,
        "ok": True,
        "none": None,
    }


@pytest.mark.parametrize(
    "field",
    [
        "api_key",
        "apiKey",
        "instance_api_key",
        "jupyter_token",
        "jupyter_url",
        "private_key",
        "password",
        "client_secret",
        "Authorization",
        "sid",
    ],
)
def test_secret_named_fields_are_redacted_whatever_they_hold(field: str) -> None:
    assert scrub_payload({field: "s3cr3t-value"}) == {field: REDACTED}


def test_empty_null_and_boolean_secret_fields_stay_visible() -> None:
    payload = {"api_key": None, "jupyter_token": "", "password_resettable": True}

    assert scrub_payload(payload) == payload


def test_pagination_tokens_and_public_keys_are_not_secrets() -> None:
    payload = {
        "next_token": "eyJ2YWx1ZXMiOiB7fX0=",
        "ssh_key": "ssh-ed25519 AAAA x",
        "pubKey": "ssh-ed25519 AAAA y",
        "public_key": "ssh-ed25519 AAAA z",
        "key_id": 98765,
    }

    assert scrub_payload(payload) == payload


def test_secret_environment_entries_keep_their_name_only() -> None:
    env = ["JUPYTER_PASSWORD=hunter2", "HF_TOKEN=hf_abc", "HF_HOME=/workspace/hf"]

    assert scrub_payload(env) == [
        f"JUPYTER_PASSWORD={REDACTED}",
        f"HF_TOKEN={REDACTED}",
        "HF_HOME=/workspace/hf",
    ]


@pytest.mark.parametrize(
    "text",
    [
        f"GET https://x/api?api_key={KEY}",
        f'{{"api_key": "{KEY}"}}',
        f"Authorization: Bearer {KEY}",
        f"failed for {KEY}",
    ],
)
def test_texts_lose_known_keys_and_credential_shaped_values(text: str) -> None:
    assert KEY not in scrub_text(text, [KEY])


def test_credential_shaped_values_are_removed_even_when_the_key_is_not_known() -> None:
    text = "url https://x/graphql?api_key=ABCDEFGH12345678&x=1 and token: abcdefghijk"

    scrubbed = scrub_text(text)

    assert "ABCDEFGH12345678" not in scrubbed
    assert "abcdefghijk" not in scrubbed
    assert "&x=1" in scrubbed


def test_error_codes_that_mention_keys_stay_readable() -> None:
    text = "global/invalid-api-key: API key was invalid"

    assert scrub_text(text) == text


def test_truncate_collapses_whitespace_and_marks_the_cut() -> None:
    assert truncate("a  b\n c") == "a b c"
    assert truncate("x" * 500, 10) == "x" * 9 + "…"


def _reference_scrub(value: object) -> object:
    """Scrubbing as one plain recursion, value by value (what the fast path must match)."""
    if isinstance(value, dict):
        return {
            key: (
                (item if item in (None, "") or isinstance(item, bool) else REDACTED)
                if isinstance(key, str) and _secret_name(key)
                else _reference_scrub(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_reference_scrub(item) for item in value]
    if isinstance(value, str):
        return scrub_payload([value], [KEY])[0]  # type: ignore[index]  # one string alone
    return value


def _secret_name(key: str) -> bool:
    return scrub_payload({key: "x"}) == {key: REDACTED}


_names = st.sampled_from(["id", "api_key", "token", "next_token", "env", "n", "jupyter_url"])
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(["", "plain", f"has {KEY} inside", "DB_PASSWORD=hunter22", "A=b"]),
)
_json = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_names, inner, max_size=4)
    ),
    max_leaves=30,
)


@given(_json)
def test_scrubbing_a_payload_matches_scrubbing_it_value_by_value(payload: object) -> None:
    assert scrub_payload(payload, [KEY]) == _reference_scrub(payload)


@given(_json)
def test_a_payload_just_decoded_is_scrubbed_in_place_as_a_copy_would_be(payload: object) -> None:
    # What the HTTP client does with every body: decode, then scrub what it decoded.
    decoded = json.loads(json.dumps(payload))
    before = copy.deepcopy(decoded)
    scrubbed = scrub_decoded(decoded, [KEY])
    assert scrubbed == scrub_payload(before, [KEY]) == _reference_scrub(before)
    if isinstance(decoded, dict | list):
        assert scrubbed is decoded  # nothing copied
    assert KEY not in json.dumps(scrubbed)


def test_a_copy_leaves_the_original_alone() -> None:
    payload = {"items": [{"token": "abcdef12", "env": [f"K={KEY}"]}]}
    assert scrub_payload(payload, [KEY]) == {
        "items": [{"token": REDACTED, "env": [f"K={REDACTED}"]}]
    }
    assert payload == {"items": [{"token": "abcdef12", "env": [f"K={KEY}"]}]}
