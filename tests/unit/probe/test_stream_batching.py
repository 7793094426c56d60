"""The streaming command's batching loop, run by the real shells a GPU host may have as ``sh``.

The loop between dmon and the channel keeps dated rows and writes them out ``batch_seconds`` at a
time; the header, the first row and every other line go out at once (``docs/probe.md``).
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from watchdog_gpu.probe.stream_command import StreamCommandSpec, batch_loop

SHELLS = [
    [path, "-c"] if name != "busybox" else [path, "sh", "-c"]
    for name in ("sh", "dash", "bash", "busybox")
    if (path := shutil.which(name)) is not None
]
HEADER = "#Date       Time        gpu     sm \n"
QUIET = 0.3  # how long "nothing was written" is waited for


def row(second: int, gpu: int, date: str = "20260302") -> str:
    return f" {date}   20:00:{second:02d}{gpu:>7}      0 \n"


class Loop:
    def __init__(self, shell: list[str], batch_seconds: int) -> None:
        self.process = subprocess.Popen(
            [*shell, batch_loop(batch_seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def written(self, expected: str = "", wait: float = 5.0) -> str:
        """What the loop wrote until ``expected`` is complete (or, for "", within QUIET)."""
        assert self.process.stdout is not None
        got = b""
        deadline = wait if expected else QUIET
        while len(got) < len(expected.encode()) or not expected:
            if not self.selector.select(timeout=deadline):
                break
            chunk = self.process.stdout.read()
            if not chunk:
                break
            got += chunk
        return got.decode()

    def close(self) -> str:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(10)
        os.set_blocking(self.process.stdout.fileno(), True)
        rest = self.process.stdout.read().decode()
        self.process.stdout.close()
        self.selector.close()
        return rest


@pytest.fixture(params=SHELLS, ids=" ".join)
def loop(request: pytest.FixtureRequest) -> Iterator[Loop]:
    loop = Loop(request.param, batch_seconds=3)
    try:
        yield loop
    finally:
        if loop.process.poll() is None:
            loop.process.kill()
            loop.process.wait(10)


def test_rows_go_out_batch_seconds_at_a_time_and_the_rest_at_once(loop: Loop) -> None:
    loop.send(HEADER)
    assert loop.written(HEADER) == HEADER  # the header: at once
    loop.send(row(0, 0))
    assert loop.written(row(0, 0)) == row(0, 0)  # the first row: at once
    loop.send(row(0, 1) + row(1, 0) + row(1, 1) + row(2, 0) + row(2, 1))
    assert loop.written() == ""  # kept: three seconds have not begun since the last write
    loop.send(row(3, 0))  # the third new second begins: what was kept goes out, in order
    kept = row(0, 1) + row(1, 0) + row(1, 1) + row(2, 0) + row(2, 1)
    assert loop.written(kept) == kept
    loop.send(row(3, 1) + row(4, 0))
    assert loop.written() == ""
    error = "Unable to determine the device handle for GPU0000:01:00.0: GPU is lost\n"
    loop.send(error)  # an error text goes out at once, after the rows kept before it
    assert loop.written(row(3, 0) + row(3, 1) + row(4, 0) + error) == (
        row(3, 0) + row(3, 1) + row(4, 0) + error
    )
    loop.send(row(5, 0) + row(5, 1) + " 20260302   20:00:06      0      ")
    # dmon ends (killed mid-row): the rows kept go out, the cut line without a line end.
    assert loop.close() == row(5, 0) + row(5, 1) + " 20260302   20:00:06      0      "


def test_a_new_date_is_a_new_second_and_undated_lines_are_not_kept(loop: Loop) -> None:
    loop.send(HEADER + row(59, 0, "20261231"))
    assert loop.written(HEADER + row(59, 0, "20261231"))
    loop.send(row(59, 0, "20270101") + row(59, 0, "20270102"))
    assert loop.written() == ""
    undated = "    0      0 \n"  # a dmon that ignored -o DT: every row at once
    loop.send(row(59, 0, "20270103") + undated)
    expected = row(59, 0, "20270101") + row(59, 0, "20270102") + row(59, 0, "20270103") + undated
    assert loop.written(expected) == expected
    loop.send("*  ?  [a-z]*\n")  # a line's words are never globbed
    assert loop.written("*  ?  [a-z]*\n") == "*  ?  [a-z]*\n"
    assert loop.close() == ""


@pytest.mark.parametrize("batch_seconds", [0, 31, True])
def test_the_batch_interval_is_validated(batch_seconds: object) -> None:
    with pytest.raises(ValueError, match="batch_seconds must be an integer"):
        StreamCommandSpec(batch_seconds=batch_seconds)  # type: ignore[arg-type]
