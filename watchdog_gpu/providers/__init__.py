"""Provider adapters: one module per provider, registered in ``PROVIDERS``.

The composition root builds one adapter per configured account::

    client = new_http_client(account.api_url or DEFAULT_API_URLS[account.provider])
    provider = PROVIDERS[account.provider](
        account.name, client, api_key, sleep=clock.sleep, monotonic=clock.monotonic
    )

See ``base.py`` for the protocol and ``http.py`` for the HTTP discipline.
"""

from __future__ import annotations

from watchdog_gpu.providers.base import BaseProvider, Provider
from watchdog_gpu.providers.http import DEFAULT_TIMEOUT, new_http_client
from watchdog_gpu.providers.lambda_cloud import LambdaProvider
from watchdog_gpu.providers.runpod import RunPodProvider
from watchdog_gpu.providers.vast import VastProvider

PROVIDERS: dict[str, type[BaseProvider]] = {
    "vast": VastProvider,
    "runpod": RunPodProvider,
    "lambda": LambdaProvider,
}

# Public API roots (an account's ``api_url`` overrides them: a proxy, or ``watchdog-gpu sim
# serve``). Vast's root carries no /api/vN: its paths name the version; Lambda's includes /api/v1.
DEFAULT_API_URLS: dict[str, str] = {
    "vast": "https://console.vast.ai",
    "runpod": "https://api.runpod.io",
    "lambda": "https://cloud.lambda.ai/api/v1",
}

__all__ = [
    "DEFAULT_API_URLS",
    "DEFAULT_TIMEOUT",
    "PROVIDERS",
    "BaseProvider",
    "LambdaProvider",
    "Provider",
    "RunPodProvider",
    "VastProvider",
    "new_http_client",
]
