"""The live channel inside one process: the embedded default (no `REDIS_URL`), where the worker
host and the readers share a process. Thread-safe: the worker publishes from its loop's thread,
readers wait in theirs.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from functools import cache

from app.live.channel import MAX_ENTRIES, START, TTL_SECONDS, Batch, Position
from app.live.entries import LiveEntry
from app.live.waiters import Waiters


class MemoryChannel:
    """Per conversation, a capped deque of (position, entry); positions grow across the hub."""

    def __init__(self, max_entries: int = MAX_ENTRIES, ttl: float = TTL_SECONDS) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self._logs: dict[uuid.UUID, deque[tuple[int, LiveEntry]]] = {}
        self._touched: dict[uuid.UUID, float] = {}
        self._positions = itertools.count(1)
        self._changed = threading.Condition()
        self._listeners: list[Callable[[uuid.UUID], None]] = []
        self._waiting = Waiters()  # readers waiting on an event loop

    def publish(self, batch: Sequence[tuple[uuid.UUID, LiveEntry]]) -> None:
        now = time.monotonic()
        with self._changed:
            for conversation_id, entry in batch:
                log = self._logs.get(conversation_id)
                if log is None:
                    log = self._logs[conversation_id] = deque(maxlen=self.max_entries)
                log.append((next(self._positions), entry))
                self._touched[conversation_id] = now
            self._expire(now)
            self._changed.notify_all()
            self._waiting.wake_all()

    def read(self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0) -> Batch:
        since = int(after or START)
        deadline = time.monotonic() + block
        with self._changed:
            while True:
                found = self._after(conversation_id, since)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    break
                self._changed.wait(remaining)
        return _batch(found, since)

    async def aread(
        self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0
    ) -> Batch:
        """`read` on the event loop: waits without a thread."""
        since = int(after or START)
        deadline = time.monotonic() + block
        while True:
            with self._changed:
                found = self._after(conversation_id, since)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return _batch(found, since)
                waiter = self._waiting.add()
            await waiter.wait(remaining)

    def _after(self, conversation_id: uuid.UUID, since: int) -> list[tuple[int, LiveEntry]]:
        log = self._logs.get(conversation_id, ())
        return [(position, entry) for position, entry in log if position > since]

    def announce_cancel(self, conversation_id: uuid.UUID) -> None:
        with self._changed:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(conversation_id)

    def on_cancel(self, callback: Callable[[uuid.UUID], None]) -> Callable[[], None]:
        with self._changed:
            self._listeners.append(callback)

        def stop() -> None:
            with self._changed:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return stop

    def ping(self) -> None:
        """The hub is this process's memory: always up."""

    def close(self) -> None:
        """The hub lives as long as its process; closing a handle on it does nothing."""

    def _expire(self, now: float) -> None:
        stale = [key for key, touched in self._touched.items() if now - touched > self.ttl]
        for key in stale:
            del self._logs[key], self._touched[key]


def _batch(found: list[tuple[int, LiveEntry]], since: int) -> Batch:
    position = str(found[-1][0]) if found else str(since)
    return Batch(position, [entry for _, entry in found])


@cache
def process_hub() -> MemoryChannel:
    """The one hub of this process."""
    return MemoryChannel()


__all__ = ["MemoryChannel", "process_hub"]
