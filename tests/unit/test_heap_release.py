"""The heap release after the daemon's jobs: paced, harmless where there is no glibc."""

from __future__ import annotations

import platform
import sys

import pytest

from tests.support.monotonic import HandMonotonic
from watchdog_gpu.heap_release import HeapRelease


def test_a_burst_of_jobs_shares_one_trim_and_the_next_comes_after_the_interval() -> None:
    clock, calls = HandMonotonic(), list[int]()

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    release = HeapRelease(clock, min_interval=10.0, trim=trim)
    assert release.after_job() is True
    clock.now += 9.9
    assert release.after_job() is False
    clock.now += 0.1
    assert release.after_job() is True
    assert calls == [0, 0]  # pad 0: keep nothing spare at the heap's top
    assert release.calls == 2


def test_without_malloc_trim_it_does_nothing() -> None:
    release = HeapRelease(HandMonotonic(), trim=None)
    assert not release.available
    assert release.after_job() is False


def test_a_failing_trim_never_reaches_the_job() -> None:
    def broken(pad: int) -> int:
        raise OSError("no")

    release = HeapRelease(HandMonotonic(), trim=broken)
    assert release.after_job() is False


def resident_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_glibc_trim_gives_freed_pages_below_a_live_block_back() -> None:
    release = HeapRelease.from_libc(HandMonotonic())
    assert release.available
    # 64 MiB in 4 KiB blocks (malloc's heap, not mmap), then one block after them that stays:
    # the freed ones below it cannot be returned by free() itself (the heap's top is in use).
    blocks = [bytearray(4096) for _ in range(16_384)]
    pin = bytearray(4096)
    del blocks
    freed = resident_mib()
    assert release.after_job() is True
    assert resident_mib() < freed - 32
    assert len(pin) == 4096
