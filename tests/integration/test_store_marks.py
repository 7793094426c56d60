"""Job marks (``Store.mark``): written in the writer's transaction, read fresh by other threads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from watchdog_gpu.store import Store

T0 = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)


def test_a_mark_is_seen_by_another_reader_only_once_its_batch_commits(store: Store) -> None:
    store.mark("engine-1", "evaluated", T0)
    seen: list[dict[str, datetime]] = []
    with store.batch():
        store.mark("engine-1", "evaluated", T0 + timedelta(minutes=1))
        assert store.marks("engine-1")["evaluated"] == T0 + timedelta(minutes=1)  # its own
        other = threading.Thread(target=lambda: seen.append(store.marks("engine-1")))
        other.start()
        other.join()
    assert seen == [{"evaluated": T0}]  # another thread: the committed one
    assert store.marks("engine-1") == {"evaluated": T0 + timedelta(minutes=1)}


def test_a_new_process_starts_without_marks_and_its_first_drops_the_old_ones(
    store: Store,
) -> None:
    store.mark("old", "evaluated", T0)
    store.mark("old", "probed", T0)
    assert store.marks("new") == {}  # a restarted engine waits for its own evaluation
    store.mark("new", "evaluated", T0 + timedelta(hours=1))
    assert store.marks("old") == {"probed": T0}
    assert store.marks("new") == {"evaluated": T0 + timedelta(hours=1)}
