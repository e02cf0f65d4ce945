"""One blocking reader per process for the live channel on Redis, however many readers follow.

Without it each follower blocks in its own `XREAD` on its own connection: a process that serves
1,000 event streams holds 1,000 Redis connections and makes 1,000 round trips every block
interval. With it one thread (`chatworker-live-reader`) blocks in a single `XREAD` over every
followed conversation's stream at once and hands what it reads to the waiting followers, each
woken only by its own conversation's entries.

    reader thread:  XREAD BLOCK 5000 STREAMS <wake> <k1> <k2> ... <cursor> <c1> <c2> ...
                      -> rows appended to each key's `_Feed`, its waiters woken
    a follower:     rows after its position from the feed, or wait on the feed's condition
                    (a thread) or on a future the reader resolves (`aread`, an event loop)

A follower that starts following a new key wakes the reader (an entry on the process's private
wake stream) so the key joins the next `XREAD` at once. A feed keeps the last rows it read
(`KEEP`); a follower whose position is older than what the feed can vouch for (it joined later,
or the rows were trimmed) gets None and reads Redis directly, once. A key nobody read for
`IDLE_SECONDS` is dropped. When Redis fails, every waiter gets the error (followers fall back to
the committed log) and the reader tries again every second.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis

from app.live.waiters import Waiters

log = logging.getLogger(__name__)

BLOCK_MS = 5000  # under the connection's socket timeout (15 s)
KEEP = 256  # rows a feed keeps once every waiter has had them
IDLE_SECONDS = 30.0  # a key nobody reads for this long leaves the XREAD
READ_COUNT = 1000  # rows per key per XREAD
_RETRY_S = 1.0
_WAIT = object()  # (`_found`: nothing yet, time left)
WAKE_PREFIX = "chatworker:live-wake:"

Row = tuple[str, dict[str, str]]  # (entry id, fields), as redis-py returns them


def parse_id(value: str) -> tuple[int, int]:
    """A stream entry id ("1700000000000-3", or "0") as a comparable pair."""
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class _Feed:
    cursor: str  # where the reader thread reads this key from next
    floor: tuple[int, int]  # every row after this id that the reader read is in `rows`
    condition: threading.Condition
    ids: list[tuple[int, int]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    touched: float = field(default_factory=time.monotonic)
    waiters: int = 0
    waiting: Waiters = field(default_factory=Waiters)  # the followers waiting on an event loop

    def after(self, position: tuple[int, int]) -> list[Row]:
        return self.rows[bisect.bisect_right(self.ids, position) :]

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            self.ids.append(parse_id(row[0]))
            self.rows.append(row)
        self.cursor = rows[-1][0]
        if len(self.rows) > 2 * KEEP:
            self.floor = self.ids[-KEEP - 1]
            del self.ids[:-KEEP]
            del self.rows[:-KEEP]


class Multiplexer:
    """Blocking reads of many stream keys through one `XREAD` (see the module's docstring)."""

    def __init__(self, client: redis.Redis, *, block_ms: int = BLOCK_MS) -> None:
        self.redis = client
        self.block_ms = block_ms
        self.wake_key = f"{WAKE_PREFIX}{uuid.uuid4()}"
        self._wake_cursor = "0"
        self._lock = threading.Lock()
        self._feeds: dict[str, _Feed] = {}
        self._error: Exception | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # XREAD calls made (for tests and benchmarks)

    def read(self, key: str, after: str, block: float) -> list[Row] | None:
        """The rows of `key` after `after`, waiting up to `block` seconds for the first; None
        when this reader cannot vouch for what follows `after` (read Redis directly). Raises
        while Redis is failing."""
        position = parse_id(after)
        deadline = time.monotonic() + block
        feed, new = self._feed(key, after, position)
        if new:
            self._wake()  # the key joins the XREAD now, not after the current block
        with self._lock:
            while True:
                found = self._found(feed, position, deadline)
                if found is not _WAIT:
                    return found  # type: ignore[return-value]
                feed.waiters += 1
                try:
                    feed.condition.wait(deadline - time.monotonic())
                finally:
                    feed.waiters -= 1
                    feed.touched = time.monotonic()

    async def aread(self, key: str, after: str, block: float) -> list[Row] | None:
        """`read` on the event loop: the follower waits on a future the reader thread resolves,
        holding no thread (the wake of a new key is the one short hop to a thread)."""
        position = parse_id(after)
        deadline = time.monotonic() + block
        feed, new = self._feed(key, after, position)
        if new:
            await asyncio.to_thread(self._wake)
        while True:
            with self._lock:
                found = self._found(feed, position, deadline)
                if found is not _WAIT:
                    return found  # type: ignore[return-value]
                waiter = feed.waiting.add()
                feed.waiters += 1
            try:
                await waiter.wait(deadline - time.monotonic())
            finally:
                with self._lock:
                    feed.waiters -= 1
                    feed.touched = time.monotonic()

    def _feed(self, key: str, after: str, position: tuple[int, int]) -> tuple[_Feed, bool]:
        """The key's feed (made, and the reader started, on first use), and whether it is new."""
        with self._lock:
            self._start()
            feed = self._feeds.get(key)
            new = feed is None
            if feed is None:
                feed = self._feeds[key] = _Feed(after, position, threading.Condition(self._lock))
            feed.touched = time.monotonic()
            return feed, new

    def _found(self, feed: _Feed, position: tuple[int, int], deadline: float) -> object:
        """(Under the lock.) The rows after `position`, None (read Redis directly), or `_WAIT`;
        raises while Redis fails."""
        if self._error is not None:
            raise redis.ConnectionError(f"live reader: {self._error}")
        if position < feed.floor:
            return None
        rows = feed.after(position)
        if rows or deadline - time.monotonic() <= 0:
            return rows
        return _WAIT

    def close(self) -> None:
        self._stopped.set()
        thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(self.block_ms / 1000 + 1)

    # --- the reader thread ------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._read_forever, name="chatworker-live-reader", daemon=True
            )
            self._thread.start()

    def _wake(self) -> None:
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.xadd(self.wake_key, {"w": "1"}, maxlen=16, approximate=False)
            pipe.expire(self.wake_key, 60)
            pipe.execute()
        except Exception:  # the reader is failing too, and will tell the waiters
            log.debug("live reader: could not wake it", exc_info=True)

    def _read_forever(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                self._drop_idle()
                streams = {self.wake_key: self._wake_cursor}
                streams.update((key, feed.cursor) for key, feed in self._feeds.items())
            try:
                found: Any = self.redis.xread(streams, count=READ_COUNT, block=self.block_ms)  # type: ignore[arg-type]
            except Exception as exc:
                self._fail(exc)
                self._stopped.wait(_RETRY_S)
                continue
            self.reads += 1
            with self._lock:
                if self._error is not None:
                    log.info("live reader: Redis answers again")
                    self._error = None
                for key, rows in found or []:
                    if key == self.wake_key:
                        self._wake_cursor = rows[-1][0]
                        continue
                    feed = self._feeds.get(key)
                    if feed is not None and rows:
                        feed.add(rows)
                        feed.condition.notify_all()
                        feed.waiting.wake_all()

    def _fail(self, exc: Exception) -> None:
        with self._lock:
            if self._error is None and not self._stopped.is_set():
                log.warning("live reader: Redis unavailable (%s); retrying", exc)
            self._error = exc
            for feed in self._feeds.values():
                feed.condition.notify_all()
                feed.waiting.wake_all()

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for key in [
            key
            for key, feed in self._feeds.items()
            if feed.waiters == 0 and now - feed.touched > IDLE_SECONDS
        ]:
            del self._feeds[key]

    @property
    def keys(self) -> int:
        """Keys in the XREAD now."""
        with self._lock:
            return len(self._feeds)


__all__ = ["Multiplexer", "parse_id"]
