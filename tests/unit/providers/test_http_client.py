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


def test_request_urls_are_those_httpx_merges_from_the_path() -> None:
    """ProviderHttp merges each path with the base URL once and keeps it: every request goes
    where ``client.request(method, path)`` would send it, also after the base URL changes."""
    import httpx

    from watchdog_gpu.providers.http import ProviderHttp

    seen: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json={"ok": True})

    bases = ["https://api.example.com", "https://api.example.com/v1", "https://h.test/a/b/"]
    paths = ["/instances", "instances/", "/a%20b/c?x=1", "https://other.test/p", "/", ""]
    for base in bases:
        client = httpx.Client(base_url=base, transport=httpx.MockTransport(answer))
        http = ProviderHttp(
            provider="vast",
            account="a",
            client=client,
            api_key="k" * 32,
            sleep=lambda _: None,
            monotonic=lambda: 0.0,
        )
        for path in paths * 2:
            for params in (None, {"page": "2"}):
                seen.clear()
                http.request_json("GET", path, params=params, check=lambda payload: payload)
                assert seen == [client.build_request("GET", path, params=params).url]
        client.base_url = httpx.URL("https://moved.test/v2")
        for path in paths:
            seen.clear()
            http.request_json("GET", path, check=lambda payload: payload)
            assert seen == [client.build_request("GET", path).url]
        client.close()
