"""The remote command: fixed text from validated integers, and how its output is cut."""

from __future__ import annotations

import re

import pytest

from watchdog_gpu.probe.command import (
    BEGIN_MARKER,
    END_MARKER,
    ProbeCommandSpec,
    build_probe_command,
    interactive_login,
    split_probe_output,
)

DEFAULT_COMMAND = (
    "sh -c 'echo ===WATCHDOG-GPU:BEGIN===; "
    "NVSMI_SHOW_ALL_DEVICES=1 timeout 20 nvidia-smi dmon -s u -o T -d 1 -c 10 2>&1; "
    "echo ===WATCHDOG-GPU:DMON-EXIT:$?===; "
    "timeout 10 nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory "
    "--format=csv,noheader,nounits 2>&1; "
    "echo ===WATCHDOG-GPU:APPS-EXIT:$?===; "
    "timeout 10 nvidia-smi -L 2>/dev/null; "
    "echo ===WATCHDOG-GPU:GPUS===; "
    "date +%s; stat -c %X /dev/pts/[0-9]* 2>/dev/null; "
    "echo ===WATCHDOG-GPU:END==='"
)


def output(
    dmon: str = "# gpu sm\n# Idx %\n 0 0\n",
    *,
    dmon_exit: int = 0,
    apps: str = "",
    apps_exit: int = 0,
    gpus: str = "",
    tail: str = "1700000000\n",
    end: bool = True,
    preamble: str = "",
) -> str:
    text = (
        f"{preamble}{BEGIN_MARKER}\n{dmon}===WATCHDOG-GPU:DMON-EXIT:{dmon_exit}===\n"
        f"{apps}===WATCHDOG-GPU:APPS-EXIT:{apps_exit}===\n{gpus}===WATCHDOG-GPU:GPUS===\n{tail}"
    )
    return text + (f"{END_MARKER}\n" if end else "")


def test_the_default_command_is_the_documented_fixed_text() -> None:
    assert build_probe_command(ProbeCommandSpec()) == DEFAULT_COMMAND


@pytest.mark.parametrize(
    "spec",
    [
        ProbeCommandSpec(),
        ProbeCommandSpec(samples=1, interval_seconds=1),
        ProbeCommandSpec(samples=600, interval_seconds=6),
        ProbeCommandSpec(samples=30, interval_seconds=2, startup_allowance_seconds=300),
    ],
)
def test_only_the_validated_numbers_vary_in_the_command(spec: ProbeCommandSpec) -> None:
    template = re.sub(r"(?<= )\d+(?= )", "N", DEFAULT_COMMAND)

    assert re.sub(r"(?<= )\d+(?= )", "N", build_probe_command(spec)) == template
    assert build_probe_command(spec).count("'") == 2  # the sh -c quotes and no other


@pytest.mark.parametrize(
    "bad",
    [
        {"samples": 0},
        {"samples": 601},
        {"samples": True},
        {"samples": 2.5},
        {"samples": "10; reboot"},
        {"interval_seconds": 0},
        {"interval_seconds": -1},
        {"startup_allowance_seconds": "$(rm -rf /)"},
        {"query_timeout_seconds": 0},
        {"samples": 600, "interval_seconds": 60},
    ],
)
def test_a_spec_refuses_anything_but_sane_integers(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must"):
        ProbeCommandSpec(**bad)  # type: ignore[arg-type]


def test_the_local_deadline_leaves_room_for_every_remote_timeout() -> None:
    spec = ProbeCommandSpec(samples=10, interval_seconds=3, startup_allowance_seconds=10)

    assert spec.dmon_timeout_seconds == 40
    assert spec.deadline_seconds > spec.dmon_timeout_seconds + 2 * spec.query_timeout_seconds


def test_output_is_cut_into_its_sections() -> None:
    sections = split_probe_output(
        output(
            dmon="# gpu sm\n 0 7\n",
            dmon_exit=0,
            apps="GPU-1, 42, python, 100\n",
            apps_exit=0,
            gpus="GPU 0: X (UUID: GPU-1)\n",
            tail="1700000000\n1699999990\n1699990000\n",
        )
    )

    assert sections is not None
    assert sections.dmon_text == "# gpu sm\n 0 7\n"
    assert sections.dmon_exit == 0
    assert sections.apps_text == "GPU-1, 42, python, 100\n"
    assert sections.apps_exit == 0
    assert sections.gpus_text == "GPU 0: X (UUID: GPU-1)\n"
    assert sections.remote_now == 1700000000
    assert sections.tty_input_times == (1699999990, 1699990000)
    assert sections.complete


def test_login_banners_before_the_begin_marker_are_dropped() -> None:
    sections = split_probe_output(output(preamble="Welcome!\n0 1 2\n", dmon_exit=9))

    assert sections is not None
    assert sections.dmon_text == "# gpu sm\n# Idx %\n 0 0\n"
    assert sections.dmon_exit == 9


def test_output_without_the_begin_marker_has_no_sections() -> None:
    assert split_probe_output("sh: 1: nvidia-smi: not found\n") is None


def test_output_cut_inside_dmon_has_no_dmon_exit_status() -> None:
    sections = split_probe_output(f"{BEGIN_MARKER}\n# gpu sm\n 0 0\n 0 ")

    assert sections is not None
    assert sections.dmon_exit is None
    assert not sections.complete


def test_output_cut_in_the_terminal_part_is_incomplete() -> None:
    sections = split_probe_output(output(tail="1700000000\n", end=False))

    assert sections is not None
    assert sections.dmon_exit == 0
    assert not sections.complete


def test_recent_terminal_input_is_an_interactive_login() -> None:
    sections = split_probe_output(output(tail="1700000000\n1699990000\n1699999000\n"))

    assert sections is not None
    assert interactive_login(sections, recent_seconds=1800) is True
    assert interactive_login(sections, recent_seconds=600) is False


def test_no_terminal_is_no_interactive_login() -> None:
    sections = split_probe_output(output(tail="1700000000\n"))

    assert sections is not None
    assert interactive_login(sections, recent_seconds=1800) is False


def test_an_unreadable_remote_clock_leaves_the_login_question_open() -> None:
    unreadable = split_probe_output(output(tail="date: command not found\n"))
    cut = split_probe_output(output(tail="1700000000\n1699999999\n", end=False))

    assert unreadable is not None
    assert cut is not None
    assert interactive_login(unreadable, recent_seconds=1800) is None
    assert interactive_login(cut, recent_seconds=1800) is None
