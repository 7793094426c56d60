"""The probe phase condenses each outcome's samples before recording them; an outcome whose
samples are condensed already (a streamed one's runs) is recorded as it came."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.unit.probe.test_condense import T0, sample
from watchdog_gpu.model import GpuSample, ProbeOutcome, ProbeStatus, Verdict
from watchdog_gpu.probe.condense import condense_runs
from watchdog_gpu.tick import _condensed


def outcome(*samples: GpuSample) -> ProbeOutcome:
    return ProbeOutcome(
        account="a",
        instance_id="1",
        at=T0 + timedelta(seconds=10),
        status=ProbeStatus.OK,
        duration_seconds=1.0,
        samples=samples,
    )


def test_a_burst_outcomes_rows_become_one_sample_per_run() -> None:
    rows = [sample(0, second, 0.0, Verdict.IDLE) for second in range(5)]
    burst = outcome(*rows)

    condensed = _condensed(burst)

    assert len(condensed.samples) == 1
    assert condensed.samples[0].verdict is Verdict.IDLE
    assert replace(condensed, samples=burst.samples) == burst


def test_a_streamed_outcomes_runs_are_kept_as_they_are() -> None:
    rows = [sample(gpu, second, 0.0, Verdict.IDLE) for gpu in (0, 1) for second in range(5)]
    streamed = outcome(*condense_runs(rows))

    assert _condensed(streamed) is streamed
