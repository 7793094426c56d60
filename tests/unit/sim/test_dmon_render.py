"""The fake nvidia-smi text must be read by the real parsers exactly as the world meant it."""

from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.probe.compute_apps import COMPUTE_APPS_FIELDS, parse_compute_apps, parse_gpu_list
from watchdog_gpu.probe.dmon import parse_dmon
from watchdog_gpu.sim.dmon_render import (
    gpu_uuid,
    render_compute_apps,
    render_dmon,
    render_gpu_list,
)
from watchdog_gpu.sim.gpu import GpuProcess, GpuReading, GpuState

BUSY_AND_IDLE = GpuState(
    state="running",
    gpus=(GpuReading(0, 97, 58, 0, 0), GpuReading(1, 0, 0, 35, 2)),
    mig=False,
    processes=(GpuProcess(0, 4100, "python3", 20424), GpuProcess(1, 4101, "ffmpeg", 1024)),
    ssh="up",
    interactive_login=False,
)
MIG = GpuState("running", (GpuReading(0, 80, 48, 0, 0),), True, (), "up", False)


def test_dmon_text_has_the_530_layout_with_trailing_spaces() -> None:
    text = render_dmon([BUSY_AND_IDLE])
    lines = text.splitlines()
    assert lines[0] == "# gpu     sm    mem    enc    dec    jpg    ofa "
    assert lines[1] == "# Idx      %      %      %      %      %      % "
    assert lines[2] == "    0     97     58      0      0      0      0 "
    assert text.endswith("\n")


def test_the_real_parser_reads_every_gpu_of_every_sample() -> None:
    table = parse_dmon(render_dmon([BUSY_AND_IDLE, BUSY_AND_IDLE, BUSY_AND_IDLE]))

    assert table.columns == ("gpu", "sm", "mem", "enc", "dec", "jpg", "ofa")
    assert len(table.rows) == 6
    assert [row.gpu for row in table.rows[:2]] == [0, 1]
    assert table.rows[0].metric("sm") == 97
    assert (table.rows[1].metric("sm"), table.rows[1].metric("enc")) == (0, 35)


def test_a_mig_gpu_prints_dashes_that_the_parser_reads_as_not_available() -> None:
    text = render_dmon([MIG])
    assert text.splitlines()[2] == "    0      -      -      -      -      -      - "
    row = parse_dmon(text).rows[0]
    assert row.metric("sm") is None
    assert row.metric("enc") is None


@pytest.mark.parametrize("legacy", [False, True])
def test_the_date_time_layout_and_the_legacy_layout_parse_too(legacy: bool) -> None:
    instants = [datetime(2026, 3, 2, 20, 0, tzinfo=UTC) + timedelta(seconds=s) for s in (0, 1)]
    text = render_dmon([BUSY_AND_IDLE, BUSY_AND_IDLE], legacy=legacy, date_time=instants)
    table = parse_dmon(text)

    assert table.rows[0].values["date"] == "20260302"
    assert table.rows[2].values["time"] == "20:00:01"
    assert table.rows[0].metric("sm") == 97
    assert ("jpg" in table.columns) is not legacy


def test_a_frame_without_gpus_prints_no_rows() -> None:
    stopped = GpuState("stopped", (), False, (), "down", False)
    assert parse_dmon(render_dmon([stopped])).rows == ()


def test_compute_apps_in_the_probes_own_query_round_trip_through_the_parser() -> None:
    text = render_compute_apps(BUSY_AND_IDLE, COMPUTE_APPS_FIELDS, header=False, units=False)
    apps = parse_compute_apps(text, COMPUTE_APPS_FIELDS)
    mapping = parse_gpu_list(render_gpu_list(BUSY_AND_IDLE, "NVIDIA GeForce RTX 4090"))

    assert [(app.pid, app.process_name, app.used_memory_mib) for app in apps] == [
        (4100, "python3", 20424),
        (4101, "ffmpeg", 1024),
    ]
    assert [mapping[app.gpu_uuid or ""] for app in apps] == [0, 1]


def test_compute_apps_with_a_header_print_canonical_names_and_units() -> None:
    text = render_compute_apps(BUSY_AND_IDLE, ("pid", "name", "used_memory"))
    assert text.splitlines() == [
        "pid, process_name, used_gpu_memory [MiB]",
        "4100, python3, 20424 MiB",
        "4101, ffmpeg, 1024 MiB",
    ]
    assert len(parse_compute_apps(text)) == 2


def test_no_processes_print_the_header_alone_and_unknown_fields_are_refused() -> None:
    idle = GpuState("running", (GpuReading(0, 0, 0, 0, 0),), False, (), "up", False)
    assert render_compute_apps(idle) == "pid, process_name, used_gpu_memory [MiB]\n"
    assert parse_compute_apps(render_compute_apps(idle)) == ()
    with pytest.raises(ValueError, match="not a compute-apps field"):
        render_compute_apps(idle, ("pid", "colour"))


def test_the_gpu_list_of_a_mig_gpu_maps_the_mig_device_to_its_gpu() -> None:
    mapping = parse_gpu_list(render_gpu_list(MIG))
    assert mapping[gpu_uuid(0)] == 0
    assert len(mapping) == 2
