"""The ``--query-compute-apps`` CSV parser and the ``nvidia-smi -L`` parser, on every fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.compute_apps import (
    COMPUTE_APPS_FIELDS,
    ComputeApp,
    canonical_field,
    parse_compute_apps,
    parse_gpu_list,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def read_fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_the_h100_load_capture_lists_three_processes_with_memory_and_ids() -> None:
    apps = parse_compute_apps(read_fixture("query_compute_apps_csv_load_h100_590.48.01.txt"))
    assert apps == (
        ComputeApp(11327, "/root/tools/memhog", 2566, MASKED_UUID, "00000000:00:09.0"),
        ComputeApp(11328, "/root/tools/memhog", 1542, MASKED_UUID, "00000000:00:09.0"),
        ComputeApp(11345, "./gpu_burn", 15690, MASKED_UUID, "00000000:00:09.0"),
    )


def test_a_header_line_alone_means_no_processes() -> None:
    text = read_fixture("query_compute_apps_csv_idle_none_h100_590.48.01.txt")
    assert parse_compute_apps(text) == ()
    assert parse_compute_apps(text, COMPUTE_APPS_FIELDS) == ()


@pytest.mark.parametrize("text", ["", "\n", "  \n"])
def test_empty_noheader_output_means_no_processes(text: str) -> None:
    assert parse_compute_apps(text, COMPUTE_APPS_FIELDS) == ()
    assert parse_compute_apps(text) == ()


def test_windows_wddm_memory_is_unknown_and_names_keep_their_spaces() -> None:
    apps = parse_compute_apps(read_fixture("query_compute_apps_csv_windows_wddm_591.86.txt"))
    assert len(apps) == 10
    assert all(app.used_memory_mib is None for app in apps)
    assert all(app.gpu_bus_id == "00000000:0C:00.0" for app in apps)
    assert [app.pid for app in apps][:3] == [12444, 15076, 2056]
    assert apps[4].process_name == r"C:\Program Files\NZXT CAM\NZXT CAM.exe"
    assert apps[2].process_name == r"C:\Windows\System32\dwm.exe"


def test_noheader_nounits_output_is_read_with_the_queried_fields() -> None:
    text = read_fixture("query_compute_apps_noheader_nounits_595.91.07.txt")
    apps = parse_compute_apps(text, ("pid", "process_name", "gpu_uuid", "used_memory"))
    assert len(apps) == 6
    assert apps[0] == ComputeApp(
        2094147, "sglang::scheduler_TP0_EP0", 90480, "GPU-e16d248c-c1a9-3302-01d6-82c18e02c9ce"
    )
    # The same process on two GPUs is two entries.
    python = [app for app in apps if app.pid == 377306]
    assert [app.gpu_uuid for app in python] == [
        "GPU-d9a18a51-6b47-71b3-44aa-dfd4448a0e88",
        "GPU-e3bec724-5bbb-759f-fdfd-e690b400593f",
    ]
    assert {app.used_memory_mib for app in python} == {550}


def test_noheader_output_without_the_fields_is_unparseable() -> None:
    text = read_fixture("query_compute_apps_noheader_nounits_595.91.07.txt")
    with pytest.raises(DmonError, match="fields unknown") as caught:
        parse_compute_apps(text)
    assert caught.value.kind == "unparseable"


def test_the_alias_header_reads_process_names_without_pids() -> None:
    apps = parse_compute_apps(read_fixture("query_compute_apps_csv_alias_dcgm_exporter94.txt"))
    assert [(app.gpu_uuid, app.pid, app.process_name) for app in apps] == [
        ("GPU-d0180485-9584-433c-6782-c335d5df2cb3", None, "vgpu"),
        ("GPU-777ead31-954e-837f-590f-6c4974d8e571", None, "vgpu"),
        ("GPU-777ead31-954e-837f-590f-6c4974d8e571", None, "vgpu"),
    ]


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("used_gpu_memory [MiB]", "used_gpu_memory"),
        ("used_memory", "used_gpu_memory"),
        ("name", "process_name"),
        (" PID ", "pid"),
        ("gpu_uuid", "gpu_uuid"),
    ],
)
def test_field_names_are_canonical(name: str, canonical: str) -> None:
    assert canonical_field(name) == canonical


def test_the_probers_query_reads_a_process_whose_name_has_commas() -> None:
    text = "GPU-a, 42, python train.py --tags a,b, c, 512\nGPU-b, 43, x, [N/A]\n"
    apps = parse_compute_apps(text, COMPUTE_APPS_FIELDS)
    assert apps == (
        ComputeApp(42, "python train.py --tags a,b, c", 512, "GPU-a"),
        ComputeApp(43, "x", None, "GPU-b"),
    )


@pytest.mark.parametrize("memory", ["[N/A]", "N/A", "[Not Supported]", ""])
def test_unavailable_memory_is_none_never_zero(memory: str) -> None:
    (app,) = parse_compute_apps(f"GPU-a, 7, job, {memory}\n", COMPUTE_APPS_FIELDS)
    assert app.used_memory_mib is None
    assert app.pid == 7


def test_a_process_named_like_an_error_word_is_still_a_process() -> None:
    text = "GPU-a, 7, /opt/invalid/not supported/bin/python, 100\n"
    (app,) = parse_compute_apps(text, COMPUTE_APPS_FIELDS)
    assert app.process_name == "/opt/invalid/not supported/bin/python"


@pytest.mark.parametrize(
    "text",
    ["GPU-a, seven, job, 100\n", "GPU-a, 7, job, lots\n", "GPU-a, 7\n", "garbage\n"],
)
def test_a_malformed_line_is_unparseable(text: str) -> None:
    with pytest.raises(DmonError) as caught:
        parse_compute_apps(text, COMPUTE_APPS_FIELDS)
    assert caught.value.kind == "unparseable"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("err_driver_not_loaded.txt", "driver_not_loaded"),
        ("err_nvml_mismatch_460.txt", "version_mismatch"),
        ("err_no_devices.txt", "no_devices"),
        ("err_no_libnvidia_ml_550.163.01.txt", "nvml_missing"),
        ("err_device_handle_unknown_error.txt", "gpu_lost"),
        ("err_invalid_field_595.91.07.txt", "invalid_argument"),
    ],
)
def test_an_error_text_instead_of_processes_raises_its_kind(name: str, kind: str) -> None:
    text = read_fixture(name)
    for fields in (COMPUTE_APPS_FIELDS, None):
        with pytest.raises(DmonError) as caught:
            parse_compute_apps(text, fields)
        assert caught.value.kind == kind


def test_an_error_text_that_splits_into_the_right_count_is_not_a_process() -> None:
    with pytest.raises(DmonError) as caught:
        parse_compute_apps("No devices were found, sorry\n", ("gpu_uuid", "process_name"))
    assert caught.value.kind == "no_devices"


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(DmonError, match="unknown compute-apps fields"):
        parse_compute_apps("1, 2\n", ("pid", "colour"))


def test_the_gpu_list_maps_gpu_and_mig_uuids_to_the_gpu_index() -> None:
    mapping = parse_gpu_list(read_fixture("list_gpus_mig_h100_590.48.01.txt"))
    assert mapping == {
        MASKED_UUID: 0,
        "MIG-00000000-0000-0000-0000-000000000000": 0,
        "MIG-00000001-0000-0000-0000-000000000001": 0,
        "MIG-00000002-0000-0000-0000-000000000002": 0,
        "MIG-00000003-0000-0000-0000-000000000003": 0,
    }


def test_the_gpu_list_of_several_gpus_keeps_each_index() -> None:
    text = "GPU 0: A (UUID: GPU-a)\nGPU 1: B (UUID: GPU-b)\n  MIG 1g.10gb Device 0: (UUID: MIG-x)\n"
    assert parse_gpu_list(text) == {"GPU-a": 0, "GPU-b": 1, "MIG-x": 1}


def test_the_gpu_list_raises_for_an_error_or_nothing() -> None:
    with pytest.raises(DmonError) as caught:
        parse_gpu_list(read_fixture("err_no_devices.txt"))
    assert caught.value.kind == "no_devices"
    with pytest.raises(DmonError) as caught:
        parse_gpu_list("hello\n")
    assert caught.value.kind == "unparseable"
