"""Reading Retry-After without a wall clock."""

from __future__ import annotations

import httpx
import pytest

from watchdog_gpu.providers.http import retry_after_seconds


def _response(headers: dict[str, str]) -> httpx.Response:
    return httpx.Response(429, headers=headers)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": " 2.5 "}, 2.5),
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "inf"}, None),
        ({}, None),
        (
            {
                "Retry-After": "Wed, 02 Dec 2026 17:01:00 GMT",
                "Date": "Wed, 02 Dec 2026 17:00:00 GMT",
            },
            60.0,
        ),
        (
            {
                "Retry-After": "Wed, 02 Dec 2026 16:59:00 GMT",
                "Date": "Wed, 02 Dec 2026 17:00:00 GMT",
            },
            0.0,
        ),
        ({"Retry-After": "Wed, 02 Dec 2026 17:01:00 GMT"}, None),  # no Date to measure from
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_seconds(_response(headers)) == expected
