"""``watchdog-gpu dmon parse FILE [--json] [--threshold N]``: the contract of product spec §10."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from watchdog_gpu.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"

# Every dmon fixture: per GPU (verdict, samples) at threshold 0, and the row count.
DMON_RESULTS: dict[str, tuple[dict[str, tuple[str, int]], int]] = {
    "dmon_default_1gpu_idle_h100_590.48.01.txt": ({"0": ("idle", 5)}, 5),
    "dmon_default_1gpu_idle_l40s_595.80.txt": ({"0": ("idle", 5)}, 5),
    "dmon_default_1gpu_idle_rtx4080s_595.71.05.txt": ({"0": ("idle", 5)}, 5),
    "dmon_default_1gpu_idle_windows_rtx2080s_610.62.txt": ({"0": ("idle", 5)}, 5),
    "dmon_default_1gpu_load_h100_590.48.01.txt": ({"0": ("busy", 5)}, 5),
    "dmon_default_1gpu_load_rtx2080s_610.57.04.txt": ({"0": ("busy", 5)}, 5),
    "dmon_default_1gpu_morpheus_readme.txt": ({"0": ("busy", 9)}, 9),
    "dmon_default_mig_idle_h100_590.48.01.txt": ({"0": ("unknown", 5)}, 5),
    "dmon_default_mig_idle_h200_580.173.02.txt": ({"0": ("unknown", 5)}, 5),
    "dmon_default_mig_idle_h200_610.43.02.txt": ({"0": ("unknown", 5)}, 5),
    "dmon_pucet_DT_d2_1gpu_2021.txt": ({"0": ("idle", 3)}, 3),
    "dmon_pucm_1gpu_driver520_ksystemstats.txt": ({"0": ("busy", 6)}, 6),
    "dmon_pucm_1gpu_driver530_ksystemstats.txt": ({"0": ("busy", 5)}, 5),
    "dmon_pucm_4gpu_rtxpro6000_595.91.07.txt": (
        {str(gpu): ("busy", 1) for gpu in range(4)},
        4,
    ),
    "dmon_pucvmet_1gpu_quadro_p2000_i1_c1.txt": ({"1": ("busy", 1)}, 1),
    "dmon_u_1gpu_log_fullbot.txt": ({"0": ("busy", 10)}, 10),
    "dmon_u_1gpu_rtx3090_select_u.txt": ({"0": ("busy", 10)}, 10),
    "synthetic/dmon_4gpu_limit_warning_SYNTHETIC.txt": (
        {str(gpu): ("idle", 1) for gpu in range(4)},
        4,
    ),
    "synthetic/dmon_default_8gpu_two_idle_SYNTHETIC.txt": (
        {str(gpu): ("busy" if gpu < 6 else "idle", 2) for gpu in range(8)},
        16,
    ),
    "synthetic/dmon_header_repeated_midstream_SYNTHETIC.txt": ({"0": ("idle", 5)}, 5),
    "synthetic/dmon_mixed_mig_nonmig_2gpu_SYNTHETIC.txt": (
        {"0": ("unknown", 1), "1": ("idle", 1)},
        2,
    ),
    "synthetic/dmon_stream_truncated_midline_SYNTHETIC.txt": ({"0": ("idle", 2)}, 2),
    "synthetic/dmon_525_misaligned_SYNTHETIC.txt": ({"0": ("busy", 3)}, 3),
    "synthetic/dmon_gpm_first_sample_dash_SYNTHETIC.txt": (
        {"0": ("busy", 2), "1": ("idle", 2)},
        4,
    ),
    "synthetic/dmon_u_DT_stall_blank_line_SYNTHETIC.txt": ({"0": ("busy", 4)}, 4),
}

ERROR_KINDS = {
    "err_device_handle_unknown_error.txt": "gpu_lost",
    "err_dmon_not_supported_geforce_415.27.txt": "not_supported",
    "err_driver_not_loaded.txt": "driver_not_loaded",
    "err_invalid_field_595.91.07.txt": "invalid_argument",
    "err_no_devices.txt": "no_devices",
    "err_no_libnvidia_ml_550.163.01.txt": "nvml_missing",
    "err_nvml_mismatch_460.txt": "version_mismatch",
    "pmon_load_h100_590.48.01.txt": "unparseable",
    "query_gpu_csv_gb10_na.txt": "unparseable",
    "list_gpus_mig_h100_590.48.01.txt": "unparseable",
}


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["dmon", "parse", *args, "--json"])
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1  # one JSON object on one line
    document: dict[str, Any] = json.loads(captured.out)
    return code, document, captured.err


def test_every_dmon_fixture_has_an_expected_result() -> None:
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("dmon_*.txt")}
    assert on_disk == set(DMON_RESULTS)


@pytest.mark.parametrize("name", sorted(DMON_RESULTS))
def test_json_output_for_every_dmon_fixture(capsys: pytest.CaptureFixture[str], name: str) -> None:
    gpus, rows = DMON_RESULTS[name]
    code, document, _ = run_json(capsys, str(FIXTURES / name), "--threshold", "0")
    assert code == 0
    assert list(document) == ["ok", "error", "rows", "gpus", "threshold"]
    assert document["threshold"] == 0
    assert (document["ok"], document["error"]) == (True, None)
    assert len(document["rows"]) == rows
    assert {
        gpu: (entry["verdict"], entry["samples"]) for gpu, entry in document["gpus"].items()
    } == gpus
    for row in document["rows"]:
        assert isinstance(row["gpu"], int)
        assert all(key == key.lower() for key in row)


def test_json_rows_keep_nulls_numbers_and_date_time_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, document, _ = run_json(capsys, str(FIXTURES / "dmon_pucet_DT_d2_1gpu_2021.txt"))
    first = document["rows"][0]
    assert first == {
        "date": "20210102",
        "time": "19:12:31",
        "gpu": 0,
        "pwr": 37,
        "gtemp": 19,
        "mtemp": None,
        "sm": 0,
        "mem": 0,
        "enc": 0,
        "dec": 0,
        "mclk": 4006,
        "pclk": 582,
        "sbecc": None,
        "dbecc": None,
        "pci": 0,
        "rxpci": 0,
        "txpci": 1,
    }


def test_json_numbers_are_ints_when_integral_and_floats_otherwise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "floats.txt"
    path.write_text("# gpu     sm    pwr\n# Idx      %      W\n    0    2.5   70.0\n")
    _, document, _ = run_json(capsys, str(path), "--threshold", "0")
    assert document["rows"] == [{"gpu": 0, "sm": 2.5, "pwr": 70}]
    assert type(document["rows"][0]["pwr"]) is int
    assert document["gpus"] == {"0": {"verdict": "busy", "samples": 1}}


@pytest.mark.parametrize(("name", "kind"), sorted(ERROR_KINDS.items()))
def test_an_error_text_exits_3_with_the_error_object(
    capsys: pytest.CaptureFixture[str], name: str, kind: str
) -> None:
    code, document, _ = run_json(capsys, str(FIXTURES / name))
    assert code == 3
    assert document == {
        "ok": False,
        "error": {"kind": kind, "message": document["error"]["message"]},
        "rows": [],
        "gpus": {},
    }
    assert document["error"]["message"]


def test_the_error_message_is_nvidia_smis_own_text(capsys: pytest.CaptureFixture[str]) -> None:
    _, document, _ = run_json(capsys, str(FIXTURES / "err_nvml_mismatch_460.txt"))
    assert (
        document["error"]["message"] == "Failed to initialize NVML: Driver/library version mismatch"
    )


def test_the_threshold_option_changes_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "dmon_u_1gpu_rtx3090_select_u.txt")
    for threshold, verdict in (("0", "busy"), ("99.5", "busy"), ("100", "idle")):
        _, document, _ = run_json(capsys, path, "--threshold", threshold)
        assert document["gpus"]["0"]["verdict"] == verdict, threshold


@pytest.mark.parametrize("threshold", ["-1", "101", "abc", "nan"])
def test_a_bad_threshold_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], threshold: str
) -> None:
    path = str(FIXTURES / "dmon_default_1gpu_idle_h100_590.48.01.txt")
    with pytest.raises(SystemExit) as exited:
        main(["dmon", "parse", path, "--threshold", threshold])
    assert exited.value.code == 2
    assert "percentage between 0 and 100" in capsys.readouterr().err


def test_a_missing_file_exits_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.txt"
    assert main(["dmon", "parse", str(missing), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot read {missing}: No such file or directory" in captured.err


def test_a_directory_is_not_readable_as_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["dmon", "parse", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_table_shows_rows_and_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "synthetic/dmon_mixed_mig_nonmig_2gpu_SYNTHETIC.txt"
    assert main(["dmon", "parse", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        *("gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "jpg", "ofa", "mclk"),
        "pclk",
    ]
    assert lines[1].split() == ["0", "70", "42", "48", "-", "-", "-", "-", "-", "-", "2619", "345"]
    assert lines[-3:] == [
        "GPU 0: unknown (1 samples)",
        "GPU 1: idle (1 samples)",
        "(busy above 5 %)",
    ]


SM_3_PERCENT = "# gpu  sm  enc  dec\n# Idx   %    %    %\n    0   3    0    0 \n"


def test_the_default_threshold_is_the_idle_rules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 3 % is idle for idle_gpu (threshold_percent = 5 by default): dmon parse must agree.
    path = tmp_path / "sm3.txt"
    path.write_text(SM_3_PERCENT)
    _, document, _ = run_json(capsys, str(path))
    assert document["gpus"] == {"0": {"verdict": "idle", "samples": 1}}
    assert document["threshold"] == 5


def test_the_threshold_of_a_config_file_is_used(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "sm3.txt"
    path.write_text(SM_3_PERCENT)
    config = tmp_path / "config.toml"
    config.write_text("[rules.idle_gpu]\nthreshold_percent = 2\n")
    _, document, _ = run_json(capsys, str(path), "--config", str(config))
    assert document["gpus"] == {"0": {"verdict": "busy", "samples": 1}}
    assert document["threshold"] == 2
    # --threshold wins over the file.
    _, document, _ = run_json(capsys, str(path), "--config", str(config), "--threshold", "4")
    assert document["gpus"]["0"]["verdict"] == "idle"


def test_an_invalid_config_file_exits_2_with_its_problems(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "sm3.txt"
    path.write_text(SM_3_PERCENT)
    config = tmp_path / "config.toml"
    config.write_text("[rules.idle_gpu]\nthreshold_percent = 100\n")
    assert main(["dmon", "parse", str(path), "--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "rules.idle_gpu.threshold_percent: must be at most 50" in captured.err


def test_a_row_with_an_impossible_date_or_time_is_never_idle(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # docs/probe.md: a row whose date or time is not one is garbage, never a row, never idle.
    path = tmp_path / "dates.txt"
    path.write_text(
        "#Date       Time        gpu     sm    enc    dec\n"
        "#YYYYMMDD   HH:MM:SS    Idx      %      %      %\n"
        " 20261204   12:00:00      1     90      0      0 \n"
        " 20261399   12:00:00      0      0      0      0 \n"
        " 20261204   25:00:00      0      0      0      0 \n"
    )
    _, document, err = run_json(capsys, str(path))
    assert document["gpus"] == {"1": {"verdict": "busy", "samples": 1}}
    assert [row["gpu"] for row in document["rows"]] == [1]
    assert "line 4: skipped (its date or time is not one: '20261399 12:00:00')" in err
    assert "line 5: skipped (its date or time is not one: '20261204 25:00:00')" in err


def test_without_json_an_error_goes_to_stderr_with_exit_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["dmon", "parse", str(FIXTURES / "err_no_devices.txt")]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "nvidia-smi error (no_devices): No devices were found\n"


def test_notes_about_dropped_lines_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "synthetic/dmon_stream_truncated_midline_SYNTHETIC.txt"
    _, _, err = run_json(capsys, str(path))
    assert err == "note: line 5: dropped, cut off before its line end\n"


def test_a_dash_reads_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (FIXTURES / "dmon_default_1gpu_load_h100_590.48.01.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, document, _ = run_json(capsys, "-")
    assert code == 0
    assert document["gpus"] == {"0": {"verdict": "busy", "samples": 5}}


def test_utf16_output_saved_by_powershell_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (FIXTURES / "dmon_default_1gpu_idle_windows_rtx2080s_610.62.txt").read_text()
    path = tmp_path / "dmon.txt"
    path.write_bytes(text.replace("\n", "\r\n").encode("utf-16"))
    code, document, _ = run_json(capsys, str(path))
    assert code == 0
    assert document["gpus"] == {"0": {"verdict": "idle", "samples": 5}}


def test_undecodable_bytes_are_unparseable_not_a_crash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "binary.bin"
    path.write_bytes(bytes(range(256)) * 4)
    code, document, _ = run_json(capsys, str(path))
    assert code == 3
    assert document["error"]["kind"] == "unparseable"


def test_the_installed_command_runs_as_a_program() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "watchdog_gpu",
            "dmon",
            "parse",
            str(FIXTURES / "err_driver_not_loaded.txt"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3
    assert json.loads(done.stdout)["error"]["kind"] == "driver_not_loaded"
