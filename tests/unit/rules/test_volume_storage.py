"""volume_storage: a detached volume billing for longer than `after` is told, one per volume."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.rules.builders import at, fleet, volume
from watchdog_gpu.model import ActionKind
from watchdog_gpu.rules.volume_storage import VolumeStorageConfig, evaluate

CONFIG = VolumeStorageConfig()  # 7 days


def test_an_attached_volume_is_fine() -> None:
    view = fleet(at(0, days=30), volumes=[volume("v1", detached_since=None)])
    assert evaluate(view, at(0, days=30), CONFIG) == []


def test_a_detached_volume_is_told_after_the_limit_and_not_before() -> None:
    detached = volume("v1", detached_since=at(0), usd_per_hour=0.02, size_gb=200)
    assert evaluate(fleet(at(-1, days=7), volumes=[detached]), at(-1, days=7), CONFIG) == []
    (finding,) = evaluate(fleet(at(0, days=7), volumes=[detached]), at(0, days=7), CONFIG)
    assert finding.action is ActionKind.NOTIFY
    assert finding.episode_started_at == at(0)
    assert finding.evidence["usd_so_far"] == pytest.approx(0.02 * 24 * 7)
    assert "(200 GB) detached for 7d" in finding.summary


def test_two_volumes_detached_at_once_are_two_episodes() -> None:
    both = [volume("v1", detached_since=at(0)), volume("v2", detached_since=at(0))]
    view = fleet(at(0, days=8), volumes=both)
    findings = evaluate(view, at(0, days=8), CONFIG)
    assert len({finding.episode_key for finding in findings}) == 2


def test_a_free_volume_is_not_a_leak() -> None:
    view = fleet(at(0, days=8), volumes=[volume("v1", detached_since=at(0), usd_per_hour=0.0)])
    assert evaluate(view, at(0, days=8), CONFIG) == []


def test_the_limit_comes_from_the_config() -> None:
    config = VolumeStorageConfig(after=timedelta(hours=1))
    view = fleet(at(61), volumes=[volume("v1", detached_since=at(0))])
    assert len(evaluate(view, at(61), config)) == 1
