"""HTTP discipline shared by every provider adapter: retries, budgets, typed errors, malformed
payloads, partial observations and the API key never leaking (canary ``canary-key-5c1d9e``)."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

import httpx
import pytest

from watchdog_gpu.errors import (
    AuthError,
    PermanentError,
    ProviderError,
    RateLimitedError,
    RetryCancelledError,
    TransientError,
)
from watchdog_gpu.model import InstanceState
from watchdog_gpu.providers import (
    DEFAULT_API_URLS,
    PROVIDERS,
    LambdaProvider,
    Provider,
    RunPodProvider,
    VastProvider,
)
from watchdog_gpu.providers.http import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS

from .provider_harness import (
    CANARY_KEY,
    NOW,
    FakeApi,
    FakeTime,
    build,
    fixture_text,
    respond,
)


@dataclass(frozen=True)
class Listing:
    """How a provider lists instances: the route and a good (empty) answer."""

    provider: str
    method: str
    path: str
    ok_fixture: str

    def api(self, *answers: httpx.Response | Exception) -> FakeApi:
        return FakeApi().add(self.method, self.path, *answers)


LISTINGS = [
    Listing("vast", "GET", "/api/v1/instances/", "vast/instances_v1_page2.json"),
    Listing("runpod", "POST", "/graphql", "runpod/myself_pods_empty.json"),
    Listing("lambda", "GET", "/api/v1/instances", "lambda/instances_empty.json"),
]
by_provider = pytest.mark.parametrize("listing", LISTINGS, ids=lambda listing: listing.provider)


@by_provider
def test_a_429_with_retry_after_seconds_is_retried_after_exactly_that_delay(
    listing: Listing,
) -> None:
    time = FakeTime()
    api = listing.api(
        respond(429, fixture="vast/error_429_json.json", headers={"Retry-After": "7"}),
        respond(fixture=listing.ok_fixture),
    )

    build(listing.provider, api, time=time).list_instances(NOW)

    assert time.sleeps == [7.0]
    assert len(api.requests) == 2


@by_provider
def test_a_retry_after_date_is_measured_against_the_response_date(listing: Listing) -> None:
    time = FakeTime()
    headers = {
        "Retry-After": "Wed, 02 Dec 2026 17:00:12 GMT",
        "Date": "Wed, 02 Dec 2026 17:00:00 GMT",
    }
    api = listing.api(
        respond(429, fixture="vast/error_429_plain.txt", headers=headers),
        respond(fixture=listing.ok_fixture),
    )

    build(listing.provider, api, time=time).list_instances(NOW)

    assert time.sleeps == [12.0]


@by_provider
def test_a_retry_after_beyond_the_budget_gives_up_at_once_and_says_how_long(
    listing: Listing,
) -> None:
    time = FakeTime()
    api = listing.api(respond(429, "slow down", headers={"Retry-After": "600"}))
    provider = build(listing.provider, api, time=time, retry_budget_seconds=60)

    with pytest.raises(RateLimitedError) as caught:
        provider.list_instances(NOW)

    assert caught.value.retry_after_seconds == 600.0
    assert caught.value.status_code == 429
    assert time.sleeps == []
    assert len(api.requests) == 1


@by_provider
def test_a_run_of_500s_ends_in_a_transient_error_within_the_retry_budget(
    listing: Listing,
) -> None:
    time = FakeTime()
    start = time.now
    api = listing.api(respond(500, {"error": "internal", "msg": "boom"}))
    provider = build(listing.provider, api, time=time, retry_budget_seconds=60)

    with pytest.raises(TransientError, match="HTTP 500") as caught:
        provider.list_instances(NOW)

    assert caught.value.status_code == 500
    assert len(api.requests) == len(time.sleeps) + 1
    assert len(time.sleeps) >= 4
    assert time.now - start <= 60
    for attempt, delay in enumerate(time.sleeps, start=1):
        step = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
        assert step / 2 <= delay <= step  # exponential, with jitter in the upper half


@by_provider
def test_a_stop_cancels_the_retry_budget_of_a_call_in_flight(listing: Listing) -> None:
    stop = threading.Event()

    class StoppedDuringBackoff(FakeTime):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if len(self.sleeps) == 3:
                stop.set()  # SIGTERM arrives while the third wait runs

    time = StoppedDuringBackoff()
    start = time.now
    api = listing.api(respond(500, {"error": "internal", "msg": "boom"}))
    provider = build(listing.provider, api, time=time, retry_budget_seconds=600, stop=stop)

    with pytest.raises(RetryCancelledError, match="stopping") as caught:
        provider.list_instances(NOW)

    assert isinstance(caught.value, TransientError)  # callers keep it for a later retry
    assert time.now - start < 10  # nowhere near the 600 s budget
    assert len(api.requests) <= 3
    assert CANARY_KEY not in str(caught.value)


def test_a_stop_before_a_retry_makes_no_further_request() -> None:
    stop = threading.Event()
    stop.set()
    api = LISTINGS[0].api(respond(503, {"error": "busy"}), respond(fixture=LISTINGS[0].ok_fixture))
    provider = build("vast", api, stop=stop)

    with pytest.raises(RetryCancelledError):
        provider.list_instances(NOW)

    assert len(api.requests) == 1


@by_provider
def test_rate_limits_without_retry_after_back_off_then_raise_rate_limited(
    listing: Listing,
) -> None:
    time = FakeTime()
    api = listing.api(respond(429, fixture="vast/error_429_json.json"))

    with pytest.raises(RateLimitedError, match="API requests too frequent") as caught:
        build(listing.provider, api, time=time, retry_budget_seconds=10).list_instances(NOW)

    assert caught.value.retry_after_seconds is None
    assert len(time.sleeps) >= 2
    assert sum(time.sleeps) <= 10


@by_provider
def test_a_401_is_not_retried(listing: Listing) -> None:
    time = FakeTime()
    api = listing.api(respond(401, {"message": "Unauthorized"}))

    with pytest.raises(AuthError, match="HTTP 401") as caught:
        build(listing.provider, api, time=time).list_instances(NOW)

    assert caught.value.status_code == 401
    assert len(api.requests) == 1
    assert time.sleeps == []


@by_provider
@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (httpx.ReadTimeout("read timed out"), "timed out"),
        (httpx.ConnectError("connection refused"), "connection failed"),
    ],
    ids=["timeout", "connection-error"],
)
def test_timeouts_and_connection_errors_are_retried_then_transient(
    listing: Listing, failure: Exception, message: str
) -> None:
    time = FakeTime()
    api = listing.api(failure)

    with pytest.raises(TransientError, match=message):
        build(listing.provider, api, time=time, retry_budget_seconds=20).list_instances(NOW)

    assert len(api.requests) > 2


@by_provider
def test_a_timeout_then_a_good_answer_succeeds(listing: Listing) -> None:
    api = listing.api(httpx.ConnectTimeout("slow"), respond(fixture=listing.ok_fixture))

    instances = build(listing.provider, api).list_instances(NOW)

    assert all(instance.provider == listing.provider for instance in instances)
    assert len(api.requests) == 2


@by_provider
def test_a_502_html_page_is_transient_and_quoted_by_its_title(listing: Listing) -> None:
    page = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    api = listing.api(respond(502, page))

    with pytest.raises(TransientError, match="HTML page '502 Bad Gateway'"):
        build(listing.provider, api, retry_budget_seconds=3).list_instances(NOW)


MALFORMED = {
    "html-page": "<!DOCTYPE html><html><title>Just a moment...</title></html>",
    "truncated-json": '{"instances": [{"id": 1, "actual_',
    "wrong-type-list": [],
    "wrong-type-string": "instances",
    "null-body-field": {"instances": None, "data": None},
    "wrong-type-field": {"instances": "x", "data": {"myself": {"pods": "x"}}},
}


@by_provider
@pytest.mark.parametrize("variant", list(MALFORMED))
def test_a_malformed_listing_is_a_permanent_error_and_is_not_retried(
    listing: Listing, variant: str
) -> None:
    body = MALFORMED[variant]
    answer = (
        httpx.Response(200, content=body.encode()) if isinstance(body, str) else respond(200, body)
    )
    api = listing.api(answer)

    with pytest.raises(PermanentError):
        build(listing.provider, api).list_instances(NOW)
    assert len(api.requests) == 1


WEIRD_ROWS = {
    "vast": {
        "instances": [
            {
                "id": 5,
                "actual_status": 42,
                "dph_total": "expensive",
                "storage_total_cost": None,
                "is_bid": "yes",
                "ssh_host": ["x"],
                "ssh_port": "abc",
                "ports": "none",
                "num_gpus": -1,
                "start_date": "yesterday",
            },
            {"id": 6, "actual_status": "offline"},
        ]
    },
    "runpod": {
        "data": {
            "myself": {
                "pods": [
                    {
                        "id": "abc",
                        "desiredStatus": None,
                        "runtime": "up",
                        "costPerHr": None,
                        "machine": 7,
                        "gpuCount": "two",
                    },
                    {"id": "def", "desiredStatus": "DEAD"},
                ]
            }
        }
    },
    "lambda": {
        "data": [
            {"id": "abc", "status": ["active"], "instance_type": None, "ip": 7},
            {"id": "def", "status": "preempted"},
        ]
    },
}


@by_provider
def test_odd_fields_in_a_row_give_unknown_values_never_a_crash(listing: Listing) -> None:
    path = "/api/v0/instances/" if listing.provider == "vast" else listing.path
    api = FakeApi().add(listing.method, path, respond(200, WEIRD_ROWS[listing.provider]))
    if listing.provider == "vast":
        api.add("GET", listing.path, respond(404, {"detail": "Not Found"}))

    odd, unlisted = build(listing.provider, api).list_instances(NOW)

    assert odd.state is InstanceState.UNKNOWN
    assert unlisted.state is InstanceState.UNKNOWN
    assert odd.compute_usd_per_hour is None
    assert odd.gpu_count is None
    assert odd.ssh_host is None
    assert odd.ssh_port is None
    assert odd.created_at is None


@by_provider
def test_a_row_without_an_id_fails_the_listing_rather_than_vanishing(listing: Listing) -> None:
    rows: dict[str, object] = {
        "vast": {"instances": [{"actual_status": "running"}], "next_token": None},
        "runpod": {"data": {"myself": {"pods": [{"desiredStatus": "RUNNING"}]}}},
        "lambda": {"data": [{"status": "active"}]},
    }
    api = listing.api(respond(200, rows[listing.provider]))

    with pytest.raises(PermanentError, match="id"):
        build(listing.provider, api).list_instances(NOW)


@by_provider
def test_a_client_without_timeouts_still_sends_every_request_with_one(listing: Listing) -> None:
    api = listing.api(respond(fixture=listing.ok_fixture))
    client = httpx.Client(
        base_url=DEFAULT_API_URLS[listing.provider],
        transport=httpx.MockTransport(api),
        timeout=None,
    )
    time = FakeTime()
    provider = PROVIDERS[listing.provider](
        "acct", client, CANARY_KEY, sleep=time.sleep, monotonic=time.monotonic
    )

    provider.list_instances(NOW)  # the FakeApi asserts the timeout on the request

    assert len(api.requests) == 1


# ---- the canary key never leaks ------------------------------------------------------------


def _echoing_api(listing: Listing) -> FakeApi:
    """Every error path echoes the key back, in bodies and exception texts."""
    return listing.api(
        respond(500, f"internal error while checking key {CANARY_KEY}"),
        httpx.ConnectError(f"could not connect with api_key={CANARY_KEY}"),
        respond(400, {"msg": f"bad request for Bearer {CANARY_KEY}", "api_key": CANARY_KEY}),
    )


@by_provider
def test_the_canary_key_never_appears_in_errors_or_logs(
    listing: Listing, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api = _echoing_api(listing)
    provider = build(listing.provider, api)

    with pytest.raises(ProviderError) as caught:
        provider.list_instances(NOW)

    assert len(api.requests) == 3  # 500 and the connection error were retried; the 400 ends it
    assert isinstance(caught.value, PermanentError)
    for text in (str(caught.value), repr(caught.value), caplog.text, repr(provider)):
        assert CANARY_KEY not in text
    assert "retried" in caplog.text  # the retries were logged, without the key


def test_the_canary_key_echoed_by_vast_users_current_never_reaches_a_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    body = fixture_text("vast/users_current.json").replace(
        "REDACTED-TEST-KEY-do-not-log", CANARY_KEY
    )
    api = (
        FakeApi()
        .add("GET", "/api/v1/instances/", respond(fixture="vast/instances_v1_page2.json"))
        .add("GET", "/api/v0/users/current/", httpx.Response(200, content=body.encode()))
        .add("GET", "/api/v0/volumes", respond(fixture="vast/volumes_list.json"))
        .add("GET", "/api/v0/ssh/", respond(fixture="vast/ssh_keys_list.json"))
    )

    observation = build("vast", api).observe(NOW)

    assert CANARY_KEY in body
    assert observation.account.balance_usd == pytest.approx(182.37)
    assert CANARY_KEY not in repr(observation)
    assert CANARY_KEY not in caplog.text


def test_a_graphql_error_quoting_the_key_is_scrubbed() -> None:
    body = {"errors": [{"message": f"key {CANARY_KEY} lacks scope", "extensions": {}}]}
    api = FakeApi().add("POST", "/graphql", respond(200, body))

    with pytest.raises(PermanentError) as caught:
        build("runpod", api).list_instances(NOW)

    assert "lacks scope" in str(caught.value)
    assert CANARY_KEY not in str(caught.value)


def test_an_empty_api_key_is_refused_at_construction() -> None:
    time = FakeTime()
    with pytest.raises(ValueError, match="empty API key"):
        VastProvider("acct", httpx.Client(), "", sleep=time.sleep, monotonic=time.monotonic)


# ---- observations with failing secondary parts ----------------------------------------------


def test_a_failing_account_or_volume_call_does_not_lose_the_instances() -> None:
    api = (
        FakeApi()
        .add("GET", "/api/v1/instances/", respond(fixture="vast/instances_v1_page2.json"))
        .add("GET", "/api/v0/users/current/", respond(503, "down"))
        .add("GET", "/api/v0/volumes", respond(403, fixture="vast/error_403_no_auth.json"))
        .add("GET", "/api/v0/ssh/", respond(fixture="vast/ssh_keys_list.json"))
    )

    observation = build("vast", api, retry_budget_seconds=2).observe(NOW)

    assert [instance.instance_id for instance in observation.instances] == ["50090759"]
    assert observation.account.balance_usd is None
    assert observation.volumes == ()
    assert len(observation.ssh_keys) == 2
    assert set(observation.problems) == {"account", "volumes"}
    assert observation.problems["account"].startswith("transient: vast GET /api/v0/users/current/")
    assert observation.problems["volumes"].startswith("auth: ")


def test_a_failing_runpod_account_query_marks_all_three_parts() -> None:
    api = (
        FakeApi()
        .add("POST", "/graphql", respond(fixture="runpod/myself_pods.json"), body_contains="pods {")
        .add("POST", "/graphql", respond(fixture="runpod/graphql_error.json"))
    )

    observation = build("runpod", api).observe(NOW)

    assert len(observation.instances) == 5
    assert set(observation.problems) == {"account", "volumes", "ssh_keys"}
    assert observation.account.balance_usd is None


def test_a_failing_instance_listing_fails_the_observation() -> None:
    api = FakeApi().add(
        "GET", "/api/v1/instances", respond(401, fixture="lambda/error_invalid_api_key.json")
    )

    with pytest.raises(AuthError):
        build("lambda", api).observe(NOW)


def test_lambda_observe_lists_instances_filesystems_and_keys() -> None:
    api = (
        FakeApi()
        .add("GET", "/api/v1/instances", respond(fixture="lambda/instances.json"))
        .add("GET", "/api/v1/file-systems", respond(fixture="lambda/file_systems.json"))
        .add("GET", "/api/v1/ssh-keys", respond(fixture="lambda/ssh_keys.json"))
    )

    observation = build("lambda", api).observe(NOW)

    assert [request.url.path for request in api.requests] == [
        "/api/v1/instances",
        "/api/v1/file-systems",
        "/api/v1/ssh-keys",
    ]
    assert (len(observation.instances), len(observation.volumes), len(observation.ssh_keys)) == (
        2,
        2,
        1,
    )
    assert observation.problems == {}


# ---- registry --------------------------------------------------------------------------------


def test_the_registry_names_each_adapter_by_its_provider_name() -> None:
    registry = dict(PROVIDERS)
    assert registry == {"vast": VastProvider, "runpod": RunPodProvider, "lambda": LambdaProvider}
    time = FakeTime()
    for name, cls in PROVIDERS.items():
        assert cls.name == name
        assert DEFAULT_API_URLS[name].startswith("https://")
        provider = cls("acct", httpx.Client(), "k" * 8, sleep=time.sleep, monotonic=time.monotonic)
        assert isinstance(provider, Provider)
        assert provider.account == "acct"


def test_request_bodies_are_json() -> None:
    api = FakeApi().add("PUT", "/api/v0/instances/1/", respond(fixture="vast/manage_stop_ok.json"))

    build("vast", api).stop("1")

    request = api.requests[0]
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {"state": "stopped"}
