"""What only the cyclic garbage collector would free (reference cycles left behind)."""

from __future__ import annotations

import gc
from collections.abc import Callable


def cyclic_garbage(action: Callable[[], object]) -> list[object]:
    """Everything ``action`` left that plain reference counting does not free: run with the
    collector off and ``gc.DEBUG_SAVEALL`` on, then one collection. (Other threads' garbage of
    the same moment shows up too: assert on what is yours, not on an empty list.)"""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        action()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
