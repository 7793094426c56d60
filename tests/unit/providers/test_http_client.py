"""The provider clients' TLS: httpx's default verification, one context for every account."""

from __future__ import annotations

import ssl

from watchdog_gpu.providers.http import new_http_client, shared_tls_context


def _context_of(client: object) -> ssl.SSLContext:
    pool = client._transport._pool  # type: ignore[attr-defined]
    context: ssl.SSLContext = pool._ssl_context
    return context


def test_every_account_client_shares_one_verifying_tls_context() -> None:
    first = new_http_client("https://console.vast.ai/api/v0")
    second = new_http_client("https://api.runpod.io/graphql")
    try:
        assert _context_of(first) is _context_of(second) is shared_tls_context()
        assert shared_tls_context().verify_mode is ssl.CERT_REQUIRED
        assert shared_tls_context().check_hostname
        # The CA bundle is loaded (certifi's, as httpx's own default would).
        assert shared_tls_context().cert_store_stats()["x509_ca"] > 50
    finally:
        first.close()
        second.close()
