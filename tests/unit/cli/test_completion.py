"""``watchdog-gpu completion``: the scripts complete what the parser accepts, in the real shells."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.requirements import require_program
from watchdog_gpu.cli import COMMANDS, main


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def bash_complete(source: str, line: str) -> list[str]:
    """What bash offers for the last word of ``line`` (COMP_WORDS as bash would split it)."""
    words = line.split(" ")
    program = (
        f"{source}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_watchdog_gpu\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stderr == ""
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_subcommands_options_and_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = script("bash", capsys)
    assert set(bash_complete(source, "watchdog-gpu ")) == set(COMMANDS)
    assert bash_complete(source, "watchdog-gpu st") == ["status"]
    assert bash_complete(source, "watchdog-gpu fuse ") == ["status", "reset"]
    assert set(bash_complete(source, "watchdog-gpu fuse status --")) == {
        "--help",
        "--config",
        "--db",
        "--json",
    }
    assert "--json" in bash_complete(source, "watchdog-gpu status --j")
    assert bash_complete(source, "watchdog-gpu completion ") == ["bash", "zsh", "fish"]
    # A path option: nothing from the script, so bash falls back to file names (-o default).
    assert bash_complete(source, "watchdog-gpu status --db ") == []
    # A path option's value is not taken for a command word.
    after_value = bash_complete(source, "watchdog-gpu status --db fuse --")
    assert set(after_value) == {"--help", "--json", "--config", "--db"}


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse_in_their_shell(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = require_program(shell, hint="apt-get install zsh fish")
    source = script(shell, capsys)
    check = [binary, "-n"] if shell == "zsh" else [binary, "--no-execute"]
    done = subprocess.run(
        [*check], input=source, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


def test_fish_script_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    source = script("fish", capsys)
    for name in COMMANDS:
        assert f"-a '{name}'" in source
    assert "-l json" in source


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["completion", "tcsh"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_script_runs_from_the_installed_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "complete -o default -F _watchdog_gpu watchdog-gpu" in done.stdout
