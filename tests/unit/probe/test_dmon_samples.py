"""Parsed dmon rows → GpuSample values: timestamps, metrics, verdicts, the prober's one call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import SampleSource, Verdict
from watchdog_gpu.probe.dmon import parse_dmon
from watchdog_gpu.probe.samples import cycle_numbers, gpu_samples, read_probe_output, row_times

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
READ_AT = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
U_HEADER = (
    "# gpu     sm    mem    enc    dec    jpg    ofa \n"
    "# Idx      %      %      %      %      %      % \n"
)


def read_fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def u_row(gpu: int, sm: object) -> str:
    return f"{gpu:>5}{sm:>7}      0      0      0      0      0 \n"


def test_cycles_end_when_a_gpu_index_repeats() -> None:
    text = U_HEADER + "".join(u_row(gpu, 0) for gpu in (0, 1, 2, 0, 2, 0, 1))
    assert cycle_numbers(parse_dmon(text).rows) == (0, 0, 0, 1, 1, 2, 2)


def test_rows_without_time_are_spaced_by_cycle_and_end_at_the_read_time() -> None:
    table = parse_dmon(read_fixture("synthetic/dmon_default_8gpu_two_idle_SYNTHETIC.txt"))
    times = row_times(table, read_at=READ_AT, interval=timedelta(seconds=2))
    assert times == (READ_AT - 2 * SECOND,) * 8 + (READ_AT,) * 8


def test_a_single_gpu_run_gets_one_instant_per_row() -> None:
    table = parse_dmon(read_fixture("dmon_default_1gpu_idle_h100_590.48.01.txt"))
    times = row_times(table, read_at=READ_AT, interval=SECOND)
    assert times == tuple(READ_AT - n * SECOND for n in (4, 3, 2, 1, 0))


def test_printed_times_keep_their_differences_so_a_stall_shows_as_a_gap() -> None:
    table = parse_dmon(read_fixture("synthetic/dmon_u_DT_stall_blank_line_SYNTHETIC.txt"))
    times = row_times(table, read_at=READ_AT, interval=SECOND)
    assert times == tuple(READ_AT - n * SECOND for n in (9, 8, 1, 0))


def test_the_2021_dt_capture_is_two_seconds_apart() -> None:
    table = parse_dmon(read_fixture("dmon_pucet_DT_d2_1gpu_2021.txt"))
    # The interval argument is ignored when the rows carry their own time.
    times = row_times(table, read_at=READ_AT, interval=timedelta(seconds=30))
    assert times == (READ_AT - 4 * SECOND, READ_AT - 2 * SECOND, READ_AT)


def test_time_alone_wraps_at_midnight() -> None:
    text = "#Time        gpu     sm\n#HH:MM:SS    Idx      %\n"
    text += " 23:59:59      0      0\n 00:00:00      0      0\n 00:00:01      0      0\n"
    times = row_times(parse_dmon(text), read_at=READ_AT, interval=timedelta(seconds=9))
    assert times == (READ_AT - 2 * SECOND, READ_AT - SECOND, READ_AT)


def test_a_remote_clock_running_backwards_falls_back_to_even_spacing() -> None:
    text = "#Date       Time        gpu     sm\n"
    text += " 20240104   13:54:35      0      0\n 20240104   13:50:00      0      0\n"
    times = row_times(parse_dmon(text), read_at=READ_AT, interval=SECOND)
    assert times == (READ_AT - SECOND, READ_AT)


def test_an_unreadable_printed_time_falls_back_to_even_spacing() -> None:
    text = "#Date       Time        gpu     sm\n 2024-1-4   1354      0      0\n"
    assert row_times(parse_dmon(text), read_at=READ_AT, interval=SECOND) == (READ_AT,)


def test_no_instant_is_placed_before_the_command_started() -> None:
    table = parse_dmon(read_fixture("synthetic/dmon_u_DT_stall_blank_line_SYNTHETIC.txt"))
    started = READ_AT - 5 * SECOND
    times = row_times(table, read_at=READ_AT, interval=SECOND, started_at=started)
    assert times == (started, started, READ_AT - SECOND, READ_AT)


@pytest.mark.parametrize(
    ("read_at", "interval", "started_at", "message"),
    [
        (READ_AT, timedelta(0), None, "interval"),
        (datetime(2026, 3, 2, 20, 0), SECOND, None, "read_at"),
        (READ_AT, SECOND, datetime(2026, 3, 2, 19, 0), "started_at"),
    ],
)
def test_row_times_refuses_bad_arguments(
    read_at: datetime, interval: timedelta, started_at: datetime | None, message: str
) -> None:
    table = parse_dmon(U_HEADER + u_row(0, 0))
    with pytest.raises(ValueError, match=message):
        row_times(table, read_at=read_at, interval=interval, started_at=started_at)


def test_gpu_samples_carry_identity_metrics_and_verdicts() -> None:
    table = parse_dmon(read_fixture("dmon_default_1gpu_load_rtx2080s_610.57.04.txt"))
    samples = gpu_samples(
        table, account="vast-main", instance_id="123", read_at=READ_AT, interval=SECOND
    )
    assert len(samples) == 5
    first = samples[0]
    assert (first.account, first.instance_id, first.gpu_index) == ("vast-main", "123", 0)
    assert (first.sm, first.mem, first.enc, first.dec, first.jpg, first.ofa) == (
        8.0,
        3.0,
        100.0,
        0.0,
        0.0,
        0.0,
    )
    assert first.source is SampleSource.DMON
    assert all(sample.verdict is Verdict.BUSY for sample in samples)
    assert samples[-1].at == READ_AT


def test_gpu_samples_of_an_old_driver_have_no_jpg_or_ofa() -> None:
    table = parse_dmon(read_fixture("dmon_default_1gpu_morpheus_readme.txt"))
    samples = gpu_samples(table, account="a", instance_id="i", read_at=READ_AT, interval=SECOND)
    assert {(sample.jpg, sample.ofa) for sample in samples} == {(None, None)}
    assert [sample.verdict for sample in samples[:3]] == [Verdict.BUSY] * 3


def test_gpu_samples_on_mig_use_the_process_counts() -> None:
    table = parse_dmon(read_fixture("synthetic/dmon_mixed_mig_nonmig_2gpu_SYNTHETIC.txt"))
    without = gpu_samples(table, account="a", instance_id="i", read_at=READ_AT, interval=SECOND)
    assert [s.verdict for s in without] == [Verdict.UNKNOWN, Verdict.IDLE]
    assert without[0].sm is None
    with_apps = gpu_samples(
        table,
        account="a",
        instance_id="i",
        read_at=READ_AT,
        interval=SECOND,
        processes={0: 1, 1: 1},
    )
    # GPU 1 prints sm 0: a process holding it does not make it busy.
    assert [s.verdict for s in with_apps] == [Verdict.BUSY, Verdict.IDLE]


MIG_DMON = "dmon_default_mig_idle_h100_590.48.01.txt"


def test_read_probe_output_decides_a_mig_gpu_by_its_processes() -> None:
    apps = "GPU-00000000-0000-0000-0000-000000000000, 21198, gpu_burn, 15690\n"
    reading = read_probe_output(
        read_fixture(MIG_DMON),
        apps,
        account="a",
        instance_id="i",
        read_at=READ_AT,
        interval=SECOND,
    )
    assert len(reading.samples) == 5
    assert {sample.verdict for sample in reading.samples} == {Verdict.BUSY}
    assert reading.apps is not None
    assert [app.pid for app in reading.apps] == [21198]
    assert reading.notes == ()


@pytest.mark.parametrize("apps_text", [None, ""])
def test_read_probe_output_keeps_a_mig_gpu_unknown_without_processes(apps_text: str | None) -> None:
    reading = read_probe_output(
        read_fixture(MIG_DMON),
        apps_text,
        account="a",
        instance_id="i",
        read_at=READ_AT,
        interval=SECOND,
    )
    assert {sample.verdict for sample in reading.samples} == {Verdict.UNKNOWN}


def test_read_probe_output_notes_an_unreadable_process_list_and_keeps_the_samples() -> None:
    reading = read_probe_output(
        read_fixture("dmon_default_1gpu_idle_h100_590.48.01.txt"),
        "garbage\n",
        account="a",
        instance_id="i",
        read_at=READ_AT,
        interval=SECOND,
    )
    assert {sample.verdict for sample in reading.samples} == {Verdict.IDLE}
    assert reading.apps is None
    assert reading.notes[0].startswith("compute-apps not used (unparseable)")


def test_read_probe_output_raises_for_a_dmon_error_text() -> None:
    with pytest.raises(DmonError) as caught:
        read_probe_output(
            read_fixture("err_driver_not_loaded.txt"),
            read_fixture("err_driver_not_loaded.txt"),
            account="a",
            instance_id="i",
            read_at=READ_AT,
            interval=SECOND,
        )
    assert caught.value.kind == "driver_not_loaded"


def test_read_probe_output_places_processes_with_the_gpu_ids() -> None:
    text = U_HEADER + u_row(0, "-") + u_row(1, "-")
    apps = "GPU-b, 7, job, 100\n"
    reading = read_probe_output(
        text,
        apps,
        account="a",
        instance_id="i",
        read_at=READ_AT,
        interval=SECOND,
        gpu_ids={"GPU-a": 0, "GPU-b": 1},
    )
    assert [(s.gpu_index, s.verdict) for s in reading.samples] == [
        (0, Verdict.UNKNOWN),
        (1, Verdict.BUSY),
    ]
