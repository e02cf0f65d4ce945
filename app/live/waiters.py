"""Readers that wait on an event loop for what another thread produces (the live reader, a
publisher): each wait is a future on its reader's own loop, woken thread-safely, so a
process follows thousands of conversations without a thread apiece.

The producer and the readers share a lock of their own (the channel's): a reader checks for new
entries and `add`s its waiter under it, the producer appends entries and calls `wake_all` under
it, so no wake-up falls between a reader's check and its wait.
"""

from __future__ import annotations

import asyncio
import contextlib


class Waiter:
    """One reader's wait: `await wait(timeout)` returns when woken or after `timeout`."""

    __slots__ = ("future", "loop", "waiters")

    def __init__(self, waiters: Waiters) -> None:
        self.waiters = waiters
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()

    async def wait(self, timeout: float) -> None:
        # (a timer resolves the future: no `asyncio.wait`, whose two coroutines, callback and set
        # a follower would hold for as long as it waits, 10,000 times in a busy API process)
        timer = self.loop.call_later(max(0.0, timeout), _resolve, self.future)
        try:
            await self.future
        finally:
            timer.cancel()
            self.waiters.discard(self)

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Waiters:
    """The readers waiting for one thing (see the module's docstring for the locking)."""

    def __init__(self) -> None:
        self._waiting: set[Waiter] = set()

    def add(self) -> Waiter:
        """A new wait of the calling coroutine (call it on the reader's loop)."""
        waiter = Waiter(self)
        self._waiting.add(waiter)
        return waiter

    def discard(self, waiter: Waiter) -> None:
        self._waiting.discard(waiter)

    def wake_all(self) -> None:
        waiting, self._waiting = self._waiting, set()
        for waiter in waiting:
            waiter.wake()

    def __len__(self) -> int:
        return len(self._waiting)


__all__ = ["Waiter", "Waiters"]
