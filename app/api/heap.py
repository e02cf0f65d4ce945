"""The API process's heap as it starts serving: what start-up made (modules, classes, the app,
its settings and clients: ~180,000 objects the garbage collector tracks) is frozen out of the
collector's sight (`gc.freeze`), so a full collection walks only what serving made.

A full collection stops the event loop for as long as it walks: ~0.75 us an object on the
2-core machine here, so start-up's share alone was ~0.15 s of every pause, and with 10,000 open
streams (~110 tracked objects each) a pause was ~0.6 s more (`python -m bench --only sse`: the
pauses are what a stream's p95 latency is made of at that size). Frozen objects are never
collected: nothing made at start-up is garbage later (the app lives as long as the process).
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what start-up left, then freeze the rest (call it once, just before serving)."""
    gc.collect()
    gc.freeze()


__all__ = ["settle"]
