"""Every nvidia-smi fixture, asserted: rows, values, nulls and per-GPU verdicts.

The fixtures are in ``tests/fixtures/nvidia-smi`` (README there: where each came from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.dmon import DmonTable, parse_dmon
from watchdog_gpu.probe.verdicts import summarise

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"

BUSY, IDLE, UNKNOWN = Verdict.BUSY, Verdict.IDLE, Verdict.UNKNOWN
DEFAULT_COLUMNS = (
    *("gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "jpg", "ofa", "mclk", "pclk"),
)
OLD_COLUMNS = ("gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "mclk", "pclk")
U_COLUMNS = ("gpu", "sm", "mem", "enc", "dec", "jpg", "ofa")
P2000_COLUMNS = (
    *("gpu", "pwr", "temp", "sm", "mem", "enc", "dec", "mclk", "pclk", "pviol", "tviol"),
    *("fb", "bar1", "sbecc", "dbecc", "pci", "rxpci", "txpci"),
)


@dataclass(frozen=True)
class Expect:
    """What a dmon fixture must parse to.

    ``column_values``: column → its value in every row, in order. ``values``: row index → some
    values of that row. ``verdicts``: per GPU at threshold 0, and at other thresholds.
    """

    rows: int
    columns: tuple[str, ...]
    verdicts: dict[int, Verdict]
    column_values: Mapping[str, Sequence[object]] = field(default_factory=dict)
    values: Mapping[int, Mapping[str, object]] = field(default_factory=dict)
    other_thresholds: dict[float, dict[int, Verdict]] = field(default_factory=dict)
    notes: int = 0


DMON_FIXTURES: dict[str, Expect] = {
    "dmon_default_1gpu_idle_h100_590.48.01.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: IDLE},
        column_values={"sm": [0] * 5, "mtemp": [47, 47, 47, 48, 47], "pwr": [69] * 5},
        values={0: {"gpu": 0, "mclk": 2619, "pclk": 345, "jpg": 0, "ofa": 0}},
    ),
    "dmon_default_1gpu_idle_l40s_595.80.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: IDLE},
        column_values={"mtemp": [None] * 5, "mclk": [9001, 9001, 9001, 405, 405]},
        values={4: {"pwr": 37, "gtemp": 54, "sm": 0}},
    ),
    "dmon_default_1gpu_idle_rtx4080s_595.71.05.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        # mem 16-32 % from the desktop compositor is not activity: the GPU is idle.
        verdicts={0: IDLE},
        column_values={"mem": [16, 25, 26, 32, 32], "sm": [0] * 5, "mtemp": [None] * 5},
    ),
    "dmon_default_1gpu_idle_windows_rtx2080s_610.62.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: IDLE},
        column_values={"mem": [10] * 5, "pclk": [300] * 5, "mtemp": [None] * 5},
    ),
    "dmon_default_1gpu_load_h100_590.48.01.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: BUSY},
        column_values={"sm": [100] * 5, "pwr": [631, 634, 633, 634, 636], "mem": [10, 10, 9, 9, 9]},
        other_thresholds={99.0: {0: BUSY}, 100.0: {0: IDLE}},
    ),
    "dmon_default_1gpu_load_rtx2080s_610.57.04.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: BUSY},
        column_values={"sm": [8] * 5, "enc": [100] * 5, "mtemp": [None] * 5},
        # NVENC work: sm only 8 %, so a threshold of 50 on sm alone would call it idle.
        other_thresholds={50.0: {0: BUSY}},
    ),
    "dmon_default_1gpu_morpheus_readme.txt": Expect(
        rows=9,
        columns=OLD_COLUMNS,
        verdicts={0: BUSY},
        column_values={"sm": [5, 11, 3, 10, 75, 86, 99, 86, 85], "mtemp": [None] * 9},
        values={3: {"pwr": 270, "pclk": 1875}},
        other_thresholds={98.0: {0: BUSY}, 99.0: {0: IDLE}},
    ),
    "dmon_default_mig_idle_h100_590.48.01.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: UNKNOWN},
        column_values={name: [None] * 5 for name in ("sm", "mem", "enc", "dec", "jpg", "ofa")}
        | {"pwr": [70] * 5, "mtemp": [48] * 5},
    ),
    "dmon_default_mig_idle_h200_580.173.02.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: UNKNOWN},
        column_values={name: [None] * 5 for name in ("sm", "mem", "enc", "dec", "jpg", "ofa")}
        | {"pwr": [85] * 5, "mclk": [3201] * 5},
        other_thresholds={100.0: {0: UNKNOWN}},
    ),
    "dmon_default_mig_idle_h200_610.43.02.txt": Expect(
        rows=5,
        columns=DEFAULT_COLUMNS,
        verdicts={0: UNKNOWN},
        column_values={"sm": [None] * 5, "ofa": [None] * 5, "pwr": [83] * 5, "gtemp": [38] * 5},
    ),
    "dmon_pucet_DT_d2_1gpu_2021.txt": Expect(
        rows=3,
        columns=("date", "time", *OLD_COLUMNS, "sbecc", "dbecc", "pci", "rxpci", "txpci"),
        verdicts={0: IDLE},
        column_values={
            "date": ["20210102"] * 3,
            "time": ["19:12:31", "19:12:33", "19:12:35"],
            "sbecc": [None] * 3,
            "dbecc": [None] * 3,
            "pclk": [582, 1582, 1582],
            "txpci": [1, 0, 0],
        },
    ),
    "dmon_pucm_1gpu_driver520_ksystemstats.txt": Expect(
        rows=6,
        columns=(*OLD_COLUMNS, "fb", "bar1"),
        verdicts={0: BUSY},
        column_values={"sm": [3] * 6, "fb": [418] * 6, "bar1": [16] * 6, "mtemp": [None] * 6},
        other_thresholds={3.0: {0: IDLE}},
    ),
    "dmon_pucm_1gpu_driver530_ksystemstats.txt": Expect(
        rows=5,
        columns=(*DEFAULT_COLUMNS, "fb", "bar1", "ccpm"),
        verdicts={0: BUSY},
        column_values={"sm": [4] * 5, "mem": [13, 13, 13, 13, 14], "ccpm": [0] * 5},
        other_thresholds={4.0: {0: IDLE}},
    ),
    "dmon_pucm_4gpu_rtxpro6000_595.91.07.txt": Expect(
        rows=4,
        columns=(*DEFAULT_COLUMNS, "fb", "bar1", "ccpm"),
        verdicts={0: BUSY, 1: BUSY, 2: BUSY, 3: BUSY},
        column_values={
            "gpu": [0, 1, 2, 3],
            "sm": [98, 99, 100, 100],
            "fb": [90538, 90536, 48243, 48209],
            "mtemp": [None] * 4,
        },
        other_thresholds={98.0: {0: IDLE, 1: BUSY, 2: BUSY, 3: BUSY}},
    ),
    "dmon_pucvmet_1gpu_quadro_p2000_i1_c1.txt": Expect(
        rows=1,
        columns=P2000_COLUMNS,
        verdicts={1: BUSY},
        values={0: {"gpu": 1, "temp": 43, "sm": 10, "enc": 40, "tviol": 0, "sbecc": None}},
        other_thresholds={10.0: {1: BUSY}, 40.0: {1: IDLE}},
    ),
    "dmon_u_1gpu_log_fullbot.txt": Expect(
        rows=10,
        columns=U_COLUMNS,
        verdicts={0: BUSY},
        column_values={
            "sm": [46, 45, 46, 45, 46, 48, 47, 35, 4, 8],
            "dec": [1, 1, 1, 0, 0, 0, 0, 1, 1, 1],
        },
        other_thresholds={47.0: {0: BUSY}, 48.0: {0: IDLE}},
    ),
    "dmon_u_1gpu_rtx3090_select_u.txt": Expect(
        rows=10,
        columns=U_COLUMNS,
        verdicts={0: BUSY},
        column_values={
            "sm": [0, 3, 0, 3, 4, 100, 0, 0, 2, 4],
            "mem": [1, 2, 1, 2, 2, 0, 0, 0, 1, 3],
        },
        other_thresholds={5.0: {0: BUSY}, 100.0: {0: IDLE}},
    ),
    "synthetic/dmon_4gpu_limit_warning_SYNTHETIC.txt": Expect(
        rows=4,
        columns=OLD_COLUMNS,
        verdicts={0: IDLE, 1: IDLE, 2: IDLE, 3: IDLE},
        column_values={"gpu": [0, 1, 2, 3], "mclk": [877] * 4},
        notes=3,  # the three warning lines
    ),
    "synthetic/dmon_default_8gpu_two_idle_SYNTHETIC.txt": Expect(
        rows=16,
        columns=DEFAULT_COLUMNS,
        verdicts={0: BUSY, 1: BUSY, 2: BUSY, 3: BUSY, 4: BUSY, 5: BUSY, 6: IDLE, 7: IDLE},
        column_values={"gpu": list(range(8)) * 2, "sm": ([100] * 6 + [0, 0]) * 2},
    ),
    "synthetic/dmon_header_repeated_midstream_SYNTHETIC.txt": Expect(
        rows=5,  # the two repeated header lines are not rows
        columns=DEFAULT_COLUMNS,
        verdicts={0: IDLE},
        column_values={"sm": [0] * 5, "pwr": [77] * 5},
    ),
    "synthetic/dmon_mixed_mig_nonmig_2gpu_SYNTHETIC.txt": Expect(
        rows=2,
        columns=DEFAULT_COLUMNS,
        verdicts={0: UNKNOWN, 1: IDLE},
        column_values={"gpu": [0, 1], "sm": [None, 0], "dec": [None, 0], "pwr": [70, 69]},
    ),
    "synthetic/dmon_stream_truncated_midline_SYNTHETIC.txt": Expect(
        rows=2,  # the cut third row is dropped, not read as a short row
        columns=DEFAULT_COLUMNS,
        verdicts={0: IDLE},
        column_values={"pwr": [77, 77], "pclk": [345, 345]},
        notes=1,
    ),
    "synthetic/dmon_525_misaligned_SYNTHETIC.txt": Expect(
        rows=3,
        columns=(*OLD_COLUMNS, "fb", "bar1"),
        verdicts={0: BUSY},
        column_values={
            "sm": [3, 0, 0],
            "dec": [0, 0, 12],
            "mtemp": [None] * 3,
            "fb": [418, 418, 420],
            "pclk": [139, 139, 1395],
        },
        other_thresholds={3.0: {0: BUSY}, 12.0: {0: IDLE}},
    ),
    "synthetic/dmon_gpm_first_sample_dash_SYNTHETIC.txt": Expect(
        rows=4,
        columns=(*U_COLUMNS, "gract", "smutil"),
        verdicts={0: BUSY, 1: IDLE},  # GPM columns are not activity metrics; '-' there is fine
        column_values={"gract": [None, None, 41, 0], "smutil": [None, None, 33, 0]},
    ),
    "synthetic/dmon_u_DT_stall_blank_line_SYNTHETIC.txt": Expect(
        rows=4,
        columns=("date", "time", *U_COLUMNS),
        verdicts={0: BUSY},
        column_values={
            "time": ["13:54:35", "13:54:36", "13:54:43", "13:54:44"],
            "date": ["20240104"] * 4,
            "sm": [0, 0, 97, 0],
        },
    ),
}

ERROR_FIXTURES: dict[str, str] = {
    "err_device_handle_unknown_error.txt": "gpu_lost",
    "err_dmon_not_supported_geforce_415.27.txt": "not_supported",
    "err_driver_not_loaded.txt": "driver_not_loaded",
    "err_invalid_field_595.91.07.txt": "invalid_argument",
    "err_no_devices.txt": "no_devices",
    "err_no_libnvidia_ml_550.163.01.txt": "nvml_missing",
    "err_nvml_mismatch_460.txt": "version_mismatch",
}

# Outputs of other nvidia-smi commands: handed to the dmon parser they must be refused, never
# misread as samples.
OTHER_OUTPUTS = (
    "pmon_load_h100_590.48.01.txt",
    "pmon_mig_load_h100_590.48.01.txt",
    "list_gpus_mig_h100_590.48.01.txt",
    "query_compute_apps_csv_alias_dcgm_exporter94.txt",
    "query_compute_apps_csv_idle_none_h100_590.48.01.txt",
    "query_compute_apps_csv_load_h100_590.48.01.txt",
    "query_compute_apps_csv_windows_wddm_591.86.txt",
    "query_compute_apps_noheader_nounits_595.91.07.txt",
    "query_gpu_csv_gb10_na.txt",
    "query_gpu_csv_lms_timestamp_xuesongtap_2024.txt",
    "query_gpu_full_csv_idle_h100_mig_590.48.01.txt",
    "query_gpu_full_csv_load_h100_590.48.01.txt",
    "query_gpu_noheader_nounits_4gpu_595.91.07.txt",
    "query_gpu_noheader_nounits_na_brackets_595.91.07.txt",
    "query_gpu_noheader_nounits_rtx2080_440.64.txt",
)

# Fixtures asserted elsewhere (compute-apps and -L parsers in test_dmon_compute_apps.py).
ASSERTED_ELSEWHERE = frozenset(
    {
        "query_compute_apps_csv_alias_dcgm_exporter94.txt",
        "query_compute_apps_csv_idle_none_h100_590.48.01.txt",
        "query_compute_apps_csv_load_h100_590.48.01.txt",
        "query_compute_apps_csv_windows_wddm_591.86.txt",
        "query_compute_apps_noheader_nounits_595.91.07.txt",
        "list_gpus_mig_h100_590.48.01.txt",
    }
)


def read_fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def parse_fixture(name: str) -> DmonTable:
    return parse_dmon(read_fixture(name))


def test_every_fixture_file_has_an_expectation() -> None:
    on_disk = {
        str(path.relative_to(FIXTURES)) for path in FIXTURES.rglob("*.txt") if path.is_file()
    }
    covered = set(DMON_FIXTURES) | set(ERROR_FIXTURES) | set(OTHER_OUTPUTS)
    assert on_disk == covered
    assert set(OTHER_OUTPUTS) >= ASSERTED_ELSEWHERE


@pytest.mark.parametrize("name", sorted(DMON_FIXTURES))
def test_a_dmon_fixture_parses_to_its_rows_values_and_nulls(name: str) -> None:
    expect = DMON_FIXTURES[name]
    table = parse_fixture(name)
    assert len(table.rows) == expect.rows
    assert table.columns == expect.columns
    assert all(tuple(row.values) == expect.columns for row in table.rows)
    for column, in_order in expect.column_values.items():
        assert [row.values[column] for row in table.rows] == list(in_order), column
    for index, some in expect.values.items():
        assert {key: table.rows[index].values[key] for key in some} == some
    assert len(table.notes) == expect.notes, table.notes


@pytest.mark.parametrize("name", sorted(DMON_FIXTURES))
def test_a_dmon_fixture_gets_its_per_gpu_verdicts(name: str) -> None:
    expect = DMON_FIXTURES[name]
    table = parse_fixture(name)
    summary = summarise(table, threshold=0)
    assert {gpu: entry.verdict for gpu, entry in summary.items()} == expect.verdicts
    assert sum(entry.samples for entry in summary.values()) == expect.rows
    for threshold, verdicts in expect.other_thresholds.items():
        found = summarise(table, threshold=threshold)
        assert {gpu: entry.verdict for gpu, entry in found.items()} == verdicts, threshold


def test_a_text_value_is_never_a_number_and_a_dash_is_never_zero() -> None:
    for name in DMON_FIXTURES:
        text = read_fixture(name)
        for row in parse_dmon(text).rows:
            for column, value in row.values.items():
                if column in ("date", "time"):
                    assert isinstance(value, str)
                else:
                    assert value is None or isinstance(value, int)
    mig = parse_fixture("dmon_default_mig_idle_h100_590.48.01.txt")
    assert all(row.metric("sm") is None for row in mig.rows)


@pytest.mark.parametrize(("name", "kind"), sorted(ERROR_FIXTURES.items()))
def test_an_error_fixture_raises_its_kind_with_the_message(name: str, kind: str) -> None:
    text = read_fixture(name)
    with pytest.raises(DmonError) as caught:
        parse_dmon(text)
    assert caught.value.kind == kind
    first_line = text.strip().splitlines()[0].strip()
    assert str(caught.value) == first_line


@pytest.mark.parametrize("name", OTHER_OUTPUTS)
def test_output_of_another_nvidia_smi_command_is_unparseable_as_dmon(name: str) -> None:
    with pytest.raises(DmonError) as caught:
        parse_fixture(name)
    assert caught.value.kind == "unparseable"


def test_the_device_limit_warning_is_reported() -> None:
    warned = parse_fixture("synthetic/dmon_4gpu_limit_warning_SYNTHETIC.txt")
    assert warned.device_limit_warning
    assert "Only monitoring up to 4 GPUs" in warned.notes[0]
    assert not parse_fixture("dmon_pucm_4gpu_rtxpro6000_595.91.07.txt").device_limit_warning


def test_the_truncated_stream_notes_the_dropped_line() -> None:
    table = parse_fixture("synthetic/dmon_stream_truncated_midline_SYNTHETIC.txt")
    assert table.notes == ("line 5: dropped, cut off before its line end",)
    assert [row.line for row in table.rows] == [3, 4]
