"""Per-row verdicts: the busy / idle / unknown rule and process evidence."""

from __future__ import annotations

import pytest

from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.compute_apps import ComputeApp
from watchdog_gpu.probe.dmon import parse_dmon
from watchdog_gpu.probe.verdicts import (
    check_threshold,
    combine_verdicts,
    metrics_verdict,
    processes_per_gpu,
    row_verdict,
)

BUSY, IDLE, UNKNOWN = Verdict.BUSY, Verdict.IDLE, Verdict.UNKNOWN
ZEROS = {"sm": 0.0, "enc": 0.0, "dec": 0.0, "jpg": 0.0, "ofa": 0.0}


@pytest.mark.parametrize(
    ("metrics", "threshold", "processes", "verdict"),
    [
        (ZEROS, 0, None, IDLE),
        (ZEROS | {"sm": 1.0}, 0, None, BUSY),
        (ZEROS | {"sm": 5.0}, 5, None, IDLE),  # at the threshold is not above it
        (ZEROS | {"sm": 5.5}, 5, None, BUSY),
        (ZEROS | {"enc": 100.0}, 50, None, BUSY),  # NVENC work with little sm
        (ZEROS | {"dec": 60.0}, 50, None, BUSY),
        (ZEROS | {"jpg": 10.0}, 5, None, BUSY),
        (ZEROS | {"ofa": 10.0}, 5, None, BUSY),
        ({"sm": 0.0, "enc": 0.0, "dec": 0.0}, 0, None, IDLE),  # pre-530: no jpg/ofa columns
        (dict.fromkeys(ZEROS), 0, None, UNKNOWN),  # MIG: every utilisation '-'
        (dict.fromkeys(ZEROS), 0, 0, UNKNOWN),  # MIG, empty process list: still unknown
        (dict.fromkeys(ZEROS), 0, 2, BUSY),  # MIG with processes
        (ZEROS | {"sm": None, "enc": 80.0}, 5, None, BUSY),  # a shown activity decides
        (ZEROS | {"sm": None}, 0, None, UNKNOWN),
        (ZEROS | {"enc": None}, 0, None, UNKNOWN),  # enc unavailable: cannot rule it out
        (ZEROS | {"enc": None}, 0, 3, UNKNOWN),  # processes only speak when sm is unknown
        (ZEROS, 0, 3, IDLE),  # a process holding an idle GPU is the waste to catch
        ({}, 0, None, UNKNOWN),  # -s p: no utilisation printed at all
        ({}, 0, 1, BUSY),
        (ZEROS | {"sm": -1.0}, 0, None, UNKNOWN),  # nonsense is not idle
        (ZEROS | {"sm": 100.0}, 100, None, IDLE),
    ],
)
def test_metrics_verdict_follows_the_rule(
    metrics: dict[str, float | None], threshold: float, processes: int | None, verdict: Verdict
) -> None:
    assert metrics_verdict(metrics, threshold=threshold, processes=processes) is verdict


@pytest.mark.parametrize("threshold", [-1, 100.5, float("nan"), float("inf")])
def test_a_threshold_outside_0_to_100_is_refused(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        check_threshold(threshold)
    with pytest.raises(ValueError, match="threshold"):
        metrics_verdict(ZEROS, threshold=threshold)


def test_row_verdict_reads_only_the_columns_the_row_has() -> None:
    text = (
        "# gpu   pwr     sm    mem    enc    dec\n# Idx     W      %      %      %      %\n"
        "    0   300      0     90      0      0\n"
        "    1   300      -      -      -      -\n"
    )
    idle, mig = parse_dmon(text).rows
    assert row_verdict(idle) is IDLE  # mem 90 % is not activity
    assert row_verdict(mig) is UNKNOWN
    assert row_verdict(mig, processes=1) is BUSY
    assert row_verdict(mig, processes=0) is UNKNOWN


@pytest.mark.parametrize(
    ("verdicts", "combined"),
    [
        ([], UNKNOWN),
        ([IDLE], IDLE),
        ([IDLE, IDLE], IDLE),
        ([IDLE, UNKNOWN], UNKNOWN),
        ([IDLE, BUSY, UNKNOWN], BUSY),
        ([UNKNOWN], UNKNOWN),
    ],
)
def test_combine_verdicts(verdicts: list[Verdict], combined: Verdict) -> None:
    assert combine_verdicts(verdicts) is combined


def app(uuid: str | None = None, bus: str | None = None) -> ComputeApp:
    return ComputeApp(pid=1, process_name="job", used_memory_mib=10, gpu_uuid=uuid, gpu_bus_id=bus)


def test_no_process_list_is_none_and_an_empty_one_is_zero_per_gpu() -> None:
    assert processes_per_gpu(None, [0, 1]) is None
    assert processes_per_gpu([], [0, 1]) == {0: 0, 1: 0}


def test_processes_are_placed_by_uuid_or_bus_id() -> None:
    ids = {"GPU-a": 0, "GPU-b": 1, "00000000:3B:00.0": 1}
    apps = [app("GPU-a"), app("GPU-b"), app(None, "00000000:3B:00.0"), app("GPU-a")]
    assert processes_per_gpu(apps, [0, 1], ids) == {0: 2, 1: 2}


def test_a_process_on_a_gpu_dmon_did_not_show_is_not_counted() -> None:
    assert processes_per_gpu([app("GPU-c")], [0, 1], {"GPU-c": 5}) == {0: 0, 1: 0}


def test_an_unplaceable_process_belongs_to_the_only_gpu() -> None:
    assert processes_per_gpu([app("GPU-x"), app()], [3]) == {3: 2}


def test_an_unplaceable_process_counts_on_every_gpu_of_several() -> None:
    ids = {"GPU-a": 0}
    assert processes_per_gpu([app("GPU-a"), app("GPU-unknown")], [0, 1, 2], ids) == {
        0: 2,
        1: 1,
        2: 1,
    }
