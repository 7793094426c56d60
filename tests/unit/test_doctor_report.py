"""The doctor's report from plain values: unknown fields named, key checks, probe summaries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from watchdog_gpu.doctor.report import (
    KeyStatus,
    account_report,
    key_check,
    probe_reason,
    probe_summary,
)
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    Verdict,
)

NOW = datetime(2026, 3, 2, 21, 0, tzinfo=UTC)


def instance(
    instance_id: str, state: InstanceState, raw: str, **fields: object
) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="vast-main",
        instance_id=instance_id,
        name=f"box-{instance_id}",
        state=state,
        raw_state=raw,
        observed_at=NOW,
        **fields,  # type: ignore[arg-type]
    )


def sample(index: int, verdict: Verdict, sm: float | None) -> GpuSample:
    return GpuSample("vast-main", "1", NOW, index, verdict, sm=sm)


def test_an_unmapped_state_and_missing_rates_are_named_never_zero() -> None:
    exploded = instance("7", InstanceState.UNKNOWN, "exploded", compute_usd_per_hour=0.5)
    observation = AccountObservation(
        account=AccountSnapshot("vast", "vast-main", NOW, balance_usd=12.0),
        instances=(exploded,),
        problems={"volumes": "transient: HTTP 503"},
    )

    report = account_report("vast-main", "vast", observation)

    line = report.instances[0]
    assert line.billed_usd_per_hour is None  # an unknown state bills an unknown amount
    assert line.unknown[:2] == ("state ('exploded' is not a state we map)", "storage $/h")
    # "could not read" holds read failures only; Vast never reports a spend rate or limit
    assert report.unknown == ("auto-pay", "volumes (failed: transient: HTTP 503)")
    assert report.not_offered == ("spend $/h", "spend limit")
    assert report.key.status == KeyStatus.ACCEPTED


def test_facts_a_provider_never_offers_are_not_read_failures() -> None:
    def empty(provider: str) -> AccountObservation:
        return AccountObservation(account=AccountSnapshot(provider, "a", NOW), instances=())

    runpod = account_report("a", "runpod", empty("runpod"))
    assert runpod.unknown == ("balance", "spend $/h", "spend limit")  # offered, not read
    assert runpod.not_offered == ("auto-pay",)
    lambda_ = account_report("a", "lambda", empty("lambda"))
    assert lambda_.unknown == ()
    assert lambda_.not_offered == ("balance", "spend $/h", "spend limit", "auto-pay")
    refused = account_report("a", "vast", None, error_kind="auth", error="HTTP 401")
    assert refused.not_offered == ("spend $/h", "spend limit")


@pytest.mark.parametrize(
    ("status", "detail", "reason"),
    [
        (
            "unreachable",
            "127.0.0.1:2222: cannot connect: [Errno 111] Connection refused",
            "connection refused: 127.0.0.1:2222: cannot connect: [Errno 111] Connection refused",
        ),
        ("auth_failed", "none of our 1 key(s)", "permission denied: none of our 1 key(s)"),
        ("host_key_changed", "pinned SHA256:a", "host key changed: pinned SHA256:a"),
        ("timeout", "no banner in 10 s", "timed out: no banner in 10 s"),
        ("driver_error", "", "driver error"),
    ],
)
def test_a_failed_probe_says_why_in_plain_words(status: str, detail: str, reason: str) -> None:
    assert probe_reason(status, detail) == reason


def test_a_running_instance_without_an_endpoint_or_probe_says_why() -> None:
    running = instance(
        "8",
        InstanceState.RUNNING,
        "running",
        compute_usd_per_hour=0.4,
        storage_usd_per_hour=0.01,
        gpu_name="RTX 4090",
        gpu_count=1,
        disk_gb=50.0,
    )
    observation = AccountObservation(AccountSnapshot("vast", "vast-main", NOW), (running,))

    line = account_report("vast-main", "vast", observation, not_probed="x").instances[0]

    assert line.unknown == ("SSH endpoint",)
    assert line.not_probed == "no SSH endpoint listed"
    assert line.billed_usd_per_hour == pytest.approx(0.41)


def test_provider_fields_the_parser_could_not_read_are_named() -> None:
    pod = instance(
        "9",
        InstanceState.RUNNING,
        "RUNNING",
        compute_usd_per_hour=0.69,
        storage_usd_per_hour=0.01,
        gpu_name="RTX 4090",
        gpu_count=1,
        disk_gb=50.0,
        ssh_host="203.0.113.7",
        ssh_port=22,
        unreadable=("runtime.gpus",),
    )
    observation = AccountObservation(AccountSnapshot("runpod", "runpod-main", NOW), (pod,))

    line = account_report("runpod-main", "runpod", observation).instances[0]

    assert line.unknown == ("provider field runtime.gpus (unreadable this time)",)


def test_key_checks_tell_rejected_unreachable_and_partly_refused_keys_apart() -> None:
    assert key_check("vast", "auth", "HTTP 401", {}).status == KeyStatus.REJECTED
    assert key_check("runpod", "transient", "HTTP 503", {}).status == KeyStatus.UNREACHABLE
    assert key_check("lambda", "permanent", "bad JSON", {}).status == KeyStatus.ERROR
    partial = key_check("runpod", None, "", {"account": "auth: HTTP 403", "volumes": "transient"})
    assert partial.status == KeyStatus.ACCEPTED
    assert partial.missing_permissions == ("account",)
    assert "refused for: account" in partial.detail


def test_a_probe_is_busy_if_any_sample_is_idle_only_if_all_are() -> None:
    def outcome(*samples: GpuSample) -> ProbeOutcome:
        return ProbeOutcome("vast-main", "1", NOW, ProbeStatus.OK, 10.0, samples=samples)

    mixed = probe_summary(
        outcome(sample(0, Verdict.IDLE, 0), sample(1, Verdict.BUSY, 88), sample(1, Verdict.IDLE, 3))
    )
    assert (mixed.verdict, mixed.gpus, mixed.peak_util_percent) == ("busy", 2, (0, 88))
    idle = probe_summary(outcome(sample(0, Verdict.IDLE, 0), sample(0, Verdict.IDLE, 1)))
    assert idle.verdict == "idle"
    unreadable = probe_summary(
        outcome(sample(0, Verdict.IDLE, 0), sample(0, Verdict.UNKNOWN, None))
    )
    assert unreadable.verdict == "unknown"
    assert probe_summary(outcome()).verdict == "unknown"
