from datetime import UTC, datetime, timedelta

from watchdog_gpu.model import GpuSample, SampleSource, Verdict
from watchdog_gpu.probe.condense import condense_samples

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


def sample(
    gpu: int, second: int, sm: float | None, verdict: Verdict, **metrics: float | None
) -> GpuSample:
    return GpuSample(
        account="a",
        instance_id="1",
        at=T0 + timedelta(seconds=second),
        gpu_index=gpu,
        verdict=verdict,
        sm=sm,
        mem=metrics.get("mem", 0.0),
        enc=metrics.get("enc", 0.0),
        dec=metrics.get("dec", 0.0),
    )


def test_one_busy_second_keeps_the_condensed_sample_busy() -> None:
    rows = [sample(0, s, 0.0, Verdict.IDLE) for s in range(9)] + [sample(0, 9, 80.0, Verdict.BUSY)]
    idle, busy = condense_samples(rows)
    assert (idle.verdict, idle.at) == (Verdict.IDLE, T0)
    assert busy.verdict is Verdict.BUSY
    assert busy.sm == 80.0
    assert busy.at == T0 + timedelta(seconds=9)


def test_the_first_idle_row_after_the_last_busy_one_is_kept() -> None:
    rows = [sample(0, s, 70.0, Verdict.BUSY) for s in range(4)]
    rows += [sample(0, s, 0.0, Verdict.IDLE) for s in range(4, 10)]
    busy, idle = condense_samples(reversed(rows))
    assert (busy.verdict, busy.at) == (Verdict.BUSY, T0 + timedelta(seconds=3))
    assert (idle.verdict, idle.at) == (Verdict.IDLE, T0 + timedelta(seconds=4))
    assert idle.covers_from is None  # a point: the idle rule bridges it with max_sample_gap


def test_all_idle_rows_condense_to_idle_at_the_first_row() -> None:
    rows = [sample(0, s, 0.0, Verdict.IDLE) for s in range(10)]
    (condensed,) = condense_samples(rows)
    assert condensed.verdict is Verdict.IDLE
    assert condensed.at == T0


def test_an_unreadable_row_is_never_averaged_away_into_idle() -> None:
    rows = [sample(0, 0, 0.0, Verdict.IDLE), sample(0, 1, None, Verdict.UNKNOWN)]
    rows += [sample(0, 2, None, Verdict.UNKNOWN), sample(0, 3, 0.0, Verdict.UNKNOWN)]
    idle, unknown = condense_samples(rows)
    assert (idle.at, idle.verdict) == (T0, Verdict.IDLE)
    assert unknown.sm is None
    assert unknown.verdict is Verdict.UNKNOWN
    assert unknown.at == T0 + timedelta(seconds=3)


def test_each_gpu_and_source_is_condensed_on_its_own() -> None:
    rows = [
        sample(1, 0, 0.0, Verdict.IDLE),
        sample(0, 0, 50.0, Verdict.BUSY),
        sample(0, 1, 0.0, Verdict.IDLE, enc=30.0),
    ]
    api = GpuSample("a", "1", T0, 0, Verdict.IDLE, source=SampleSource.PROVIDER_API, sm=0.0)
    condensed = condense_samples([*rows, api])
    assert [(s.source, s.gpu_index, s.verdict) for s in condensed] == [
        (SampleSource.DMON, 0, Verdict.BUSY),
        (SampleSource.DMON, 0, Verdict.IDLE),
        (SampleSource.DMON, 1, Verdict.IDLE),
        (SampleSource.PROVIDER_API, 0, Verdict.IDLE),
    ]
    assert condensed[1].enc == 30.0


def test_no_samples_condense_to_none() -> None:
    assert condense_samples([]) == ()
