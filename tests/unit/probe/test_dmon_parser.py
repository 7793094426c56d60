"""Edge cases of the dmon text parser that the fixtures do not show on their own."""

from __future__ import annotations

import pytest

from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.dmon import classify_error_line, parse_dmon, parse_value

HEADER = (
    "# gpu     sm    mem    enc    dec    jpg    ofa \n"
    "# Idx      %      %      %      %      %      % \n"
)


def row(gpu: int, *values: object) -> str:
    return f"{gpu:>5}" + "".join(f"{value:>7}" for value in values) + " \n"


def test_columns_are_found_by_name_whatever_their_order() -> None:
    text = "# gpu    mem     sm\n# Idx      %      %\n    0     80      0\n"
    (only,) = parse_dmon(text).rows
    assert only.values == {"gpu": 0, "mem": 80, "sm": 0}


def test_windows_line_ends_parse_like_unix_ones() -> None:
    text = HEADER + row(0, 5, 1, 0, 0, 0, 0) + row(0, 6, 1, 0, 0, 0, 0)
    unix = parse_dmon(text)
    windows = parse_dmon(text.replace("\n", "\r\n"))
    assert [r.values for r in windows.rows] == [r.values for r in unix.rows]
    assert windows.notes == ()


def test_blank_and_whitespace_lines_are_ignored_anywhere() -> None:
    text = "\n  \n" + HEADER + "\n" + row(0, 1, 0, 0, 0, 0, 0) + "\t\n" + row(0, 2, 0, 0, 0, 0, 0)
    assert [r.values["sm"] for r in parse_dmon(text).rows] == [1, 2]


def test_a_different_header_midstream_replaces_the_columns() -> None:
    text = (
        HEADER
        + row(0, 1, 2, 0, 0, 0, 0)
        + "# gpu     sm    mem\n# Idx      %      %\n"
        + "    0      7      8\n"
    )
    table = parse_dmon(text)
    assert [dict(r.values) for r in table.rows] == [
        {"gpu": 0, "sm": 1, "mem": 2, "enc": 0, "dec": 0, "jpg": 0, "ofa": 0},
        {"gpu": 0, "sm": 7, "mem": 8},
    ]
    assert table.notes == ("line 4: a different header replaces the columns",)


def test_a_midstream_line_that_does_not_fit_is_skipped_and_noted() -> None:
    text = HEADER + row(0, 1, 0, 0, 0, 0, 0) + "    0      3\n" + row(0, 4, 0, 0, 0, 0, 0)
    table = parse_dmon(text)
    assert [r.values["sm"] for r in table.rows] == [1, 4]
    assert len(table.notes) == 1
    assert table.notes[0].startswith("line 4: skipped (does not match the header)")


def test_a_non_numeric_value_skips_its_row_rather_than_guessing() -> None:
    text = HEADER + row(0, "x", 0, 0, 0, 0, 0) + row(0, 0, 0, 0, 0, 0, 0)
    table = parse_dmon(text)
    assert [r.line for r in table.rows] == [4]
    assert "not a number" in table.notes[0]


def test_a_row_without_a_gpu_index_is_skipped() -> None:
    text = HEADER + row(0, 0, 0, 0, 0, 0, 0).replace("    0", "    -", 1) + row(1, 0, 0, 0, 0, 0, 0)
    assert [r.gpu for r in parse_dmon(text).rows] == [1]


def test_decimal_values_are_floats_and_integral_ones_ints() -> None:
    text = "# gpu     sm    pwr\n# Idx      %      W\n    0   12.5   70.0\n"
    (only,) = parse_dmon(text).rows
    assert only.values == {"gpu": 0, "sm": 12.5, "pwr": 70}
    assert isinstance(only.values["pwr"], int)


@pytest.mark.parametrize(
    ("column", "token", "value"),
    [
        ("sm", "-", None),
        ("sm", "N/A", None),
        ("sm", "[N/A]", None),
        ("sm", "0", 0),
        ("pwr", "631", 631),
        ("date", "20240104", "20240104"),
        ("time", "13:54:35", "13:54:35"),
    ],
)
def test_parse_value_reads_each_token_kind(column: str, token: str, value: object) -> None:
    assert parse_value(column, token) == value


@pytest.mark.parametrize("token", ["abc", "1,5", "nan", "inf", "0x10", ""])
def test_parse_value_refuses_what_is_not_a_number(token: str) -> None:
    with pytest.raises(ValueError, match="not a number"):
        parse_value("sm", token)


def test_a_header_alone_is_an_empty_table_not_an_error() -> None:
    table = parse_dmon(HEADER)
    assert table.rows == ()
    assert table.columns == ("gpu", "sm", "mem", "enc", "dec", "jpg", "ofa")


@pytest.mark.parametrize("text", ["", "\n", "   \n\n"])
def test_empty_output_is_unparseable(text: str) -> None:
    with pytest.raises(DmonError, match="empty output") as caught:
        parse_dmon(text)
    assert caught.value.kind == "unparseable"


@pytest.mark.parametrize(
    "text",
    [
        "hello world\n",
        "\x00\x01\x02 binary \ufffd\ufffd\n",
        "0,5,3\n1,0,0\n",
        "    0      5      3\n",  # rows without a header cannot be mapped
        HEADER.replace("gpu", "dev") + row(0, 1, 0, 0, 0, 0, 0),
    ],
)
def test_garbage_is_unparseable(text: str) -> None:
    with pytest.raises(DmonError) as caught:
        parse_dmon(text)
    assert caught.value.kind == "unparseable"


def test_a_header_whose_rows_all_fail_is_unparseable() -> None:
    with pytest.raises(DmonError, match="no line matched the dmon header") as caught:
        parse_dmon(HEADER + "    0      1\n    0      2\n")
    assert caught.value.kind == "unparseable"


def test_duplicate_column_names_are_refused() -> None:
    with pytest.raises(DmonError, match="duplicate column names") as caught:
        parse_dmon("# gpu     sm     sm\n    0      1      2\n")
    assert caught.value.kind == "unparseable"


def test_an_error_text_after_good_rows_wins_over_the_rows() -> None:
    text = (
        HEADER
        + row(0, 100, 0, 0, 0, 0, 0)
        + "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
        + "Reboot the system to recover this GPU\n"
    )
    with pytest.raises(DmonError) as caught:
        parse_dmon(text)
    assert caught.value.kind == "gpu_lost"
    assert str(caught.value).startswith("Unable to determine the device handle")


def test_an_error_text_without_a_line_end_is_still_recognised() -> None:
    with pytest.raises(DmonError) as caught:
        parse_dmon("No devices were found")
    assert caught.value.kind == "no_devices"


def test_a_cut_last_row_is_dropped_even_when_its_token_count_fits() -> None:
    # "345" cut to "34": same number of tokens, wrong value.
    text = "# gpu   pclk\n# Idx    MHz\n    0    345\n    0     34"
    table = parse_dmon(text)
    assert [r.values["pclk"] for r in table.rows] == [345]
    assert table.notes == ("line 4: dropped, cut off before its line end",)


def test_a_last_row_ending_in_the_trailing_space_is_complete_without_a_line_end() -> None:
    text = HEADER + row(0, 1, 0, 0, 0, 0, 0) + row(0, 2, 0, 0, 0, 0, 0).rstrip("\n")
    table = parse_dmon(text)
    assert [r.values["sm"] for r in table.rows] == [1, 2]
    assert table.notes == ()


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", "nvml_missing"),
        ("sh: 1: nvidia-smi: not found", "nvml_missing"),
        ("bash: nvidia-smi: command not found", "nvml_missing"),
        ("Failed to initialize NVML: Driver/library version mismatch", "version_mismatch"),
        ("NVML library version: 570.124", None),
        ("Failed to initialize NVML: Driver Not Loaded", "driver_not_loaded"),
        ("Failed to initialize NVML: Unknown Error", "driver_not_loaded"),
        ("No devices were found. Please make sure /dev/nvidia* files are readable", "no_devices"),
        ("Unable to determine the device handle for GPU0000:07:00.0: Unknown Error", "gpu_lost"),
        ("GPU 00000000:3B:00.0 has fallen off the bus.", "gpu_lost"),
        ("Not supported on the device(s)", "not_supported"),
        ('Field "bogus.field" is not a valid field to query.', "invalid_argument"),
        ("Invalid combination of input arguments. Please run 'nvidia-smi -h'.", "invalid_argument"),
        ("Failed to process command line", "invalid_argument"),
        ("WARNING: Only monitoring up to 4 GPUs is supported by default.", None),
        ("    0     69     41     47      0      0", None),
    ],
)
def test_error_lines_are_classified(line: str, kind: str | None) -> None:
    assert classify_error_line(line) == kind


def test_a_long_error_message_is_cut_to_a_readable_length() -> None:
    with pytest.raises(DmonError) as caught:
        parse_dmon("No devices were found " + "x" * 1000 + "\n")
    assert len(str(caught.value)) == 300


def test_pmon_output_is_refused_by_name() -> None:
    text = (
        "# gpu         pid   type     sm    mem    command \n    0      11327     C   -   -   a \n"
    )
    with pytest.raises(DmonError, match="pmon"):
        parse_dmon(text)


def test_rows_remember_their_line_numbers() -> None:
    text = HEADER + "\n" + row(0, 1, 0, 0, 0, 0, 0)
    assert [r.line for r in parse_dmon(text).rows] == [4]


def test_metric_is_none_for_an_absent_column_and_a_dash() -> None:
    (only,) = parse_dmon("# gpu     sm\n# Idx      %\n    0      -\n").rows
    assert only.metric("sm") is None
    assert only.metric("enc") is None
    assert only.gpu == 0


@pytest.mark.parametrize(
    "zero",
    [
        "\uff10",  # full-width ０
        "\u0660",  # Arabic-Indic ٠
        "\u06f0",  # extended Arabic-Indic ۰
        "\u0966",  # Devanagari ०
    ],
)
def test_non_ascii_digits_are_unreadable_never_idle(zero: str) -> None:
    """``int('０')`` is 0 in Python: a garbled row of such digits must not read as an idle GPU."""
    with pytest.raises(ValueError, match="not a number"):
        parse_value("sm", zero)
    text = HEADER + row(0, zero, 0, 0, 0, 0, 0)
    with pytest.raises(DmonError) as raised:
        parse_dmon(text)
    assert raised.value.kind == "unparseable"
    mixed = parse_dmon(HEADER + row(0, 7, 0, 0, 0, 0, 0) + row(1, zero, 0, 0, 0, 0, 0))
    assert [r.gpu for r in mixed.rows] == [0]
    assert any("not a number" in note for note in mixed.notes)


def test_a_gpu_index_in_non_ascii_digits_is_not_a_row() -> None:
    text = HEADER + "    \uff11" + "".join(f"{0:>7}" for _ in range(6)) + " \n"
    with pytest.raises(DmonError):
        parse_dmon(text)


@pytest.mark.parametrize("index", [64, 1000, 10**12])
def test_an_absurd_gpu_index_is_not_a_row(index: int) -> None:
    table = parse_dmon(HEADER + row(0, 1, 0, 0, 0, 0, 0) + row(index, 0, 0, 0, 0, 0, 0))
    assert [r.gpu for r in table.rows] == [0]
    assert any("no GPU index" in note for note in table.notes)


def test_the_highest_plausible_gpu_index_is_a_row() -> None:
    table = parse_dmon(HEADER + row(63, 1, 0, 0, 0, 0, 0))
    assert [r.gpu for r in table.rows] == [63]


def test_non_ascii_printed_times_are_not_read() -> None:
    with pytest.raises(ValueError, match="not ASCII"):
        parse_value("time", "\uff11\uff12:00:00")
