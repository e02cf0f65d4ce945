"""`app/api/streaming.py`: a stream holds nothing of a batch it sent while it waits for the next
(at 10,000 streams, each holding its last turn's events was ~250,000 objects for every full
garbage collection to walk)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from types import SimpleNamespace
from typing import Any

from app.api.streaming import sse_events
from app.client import Cursor
from app.live.entries import Discarded


class OneBatchThenWait:
    """A follower with one batch, then nothing until it is closed."""

    conversation_id = "c"
    cursor = Cursor(2)

    def __init__(self, batch: list[Any]) -> None:
        self.batch: list[Any] | None = batch

    async def next_batch(self, offload: Any) -> list[Any]:
        if self.batch is not None:
            batch, self.batch = self.batch, None
            return batch
        await asyncio.Event().wait()
        return []


def test_a_sent_batch_is_not_held_while_the_next_is_awaited() -> None:
    async def main() -> list[weakref.ref[Any]]:
        items = [Discarded(1, "s1", "retried"), Discarded(1, "s2", "retried")]
        kept = [weakref.ref(item) for item in items]
        follower = OneBatchThenWait([(item, Cursor(n)) for n, item in enumerate(items)])
        api = SimpleNamespace(read_step=None)
        events = sse_events(api, follower)  # type: ignore[arg-type]
        del items
        sent = [await anext(events), await anext(events)]
        waiting = asyncio.ensure_future(anext(events))  # (the stream waits for its next batch)
        await asyncio.sleep(0.05)
        del sent
        gc.collect()
        alive = [ref for ref in kept if ref() is not None]
        waiting.cancel()
        return alive

    assert asyncio.run(main()) == []
