"""One reader per process for the live channel on Redis, however many readers follow.

Without it each follower blocks in its own `XREAD` on its own connection: a process that serves
1,000 event streams holds 1,000 Redis connections and makes 1,000 round trips every block
interval. With it one thread (`chatworker-live-reader`) waits for every followed conversation at
once and hands what it reads to the waiting followers, each woken only by its own conversation's
entries.

What it waits on is a doorbell, not the streams: every publisher rings the conversation's pub/sub
channel (`chatworker:live-rung:<id>`) in the pipeline that appends its entries, and the reader is
subscribed to the channels of the conversations it follows. A ring names one conversation, so the
reader reads only the streams that changed, each from where it left off (`XRANGE (cursor +`, one
pipeline for all the rings it has): its work grows with what is published, not with how many
conversations it follows. (An `XREAD` over every followed key, the first design, built and parsed
a 20,000-argument command per read at 10,000 followed conversations: a whole core.)

    reader thread:  SUBSCRIBE <wake> rung:<c1> rung:<c2> ...   (once per key, as followers come;
                    each key read once when Redis confirms its subscription)
                    a ring for c1 -> XRANGE live:<c1> (<cursor> + -> rows appended to c1's `_Feed`,
                    its waiters woken
    a follower:     rows after its position from the feed, or wait on the feed's condition
                    (a thread) or on a future the reader resolves (`aread`, an event loop)

A follower that starts following a new key wakes the reader (a message on the process's private
wake channel) so it subscribes at once, and reads the key from the follower's position when Redis
confirms the subscription: what was published before the subscription took effect (its ring
reached nobody) is not lost. A ring that is lost (the reader reconnecting) is made up for when it
subscribes again: it then reads every followed key. A feed keeps the last rows it read (`KEEP`);
a follower whose position is older than what the feed can vouch for (it joined later, or the rows
were trimmed) gets None and reads Redis directly, once. A key nobody read for `IDLE_SECONDS` is
dropped (and unsubscribed). When Redis fails, every waiter gets the error (followers fall back to
the committed log), every feed forgets its rows (a Redis that comes back empty no longer holds
them: a follower that reads its retained entries again, from the start, must not be handed them
as new) and the reader tries again every second.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
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
IDLE_SECONDS = 30.0  # a key nobody reads for this long is dropped (and unsubscribed)
READ_COUNT = 1000  # rows per key per XRANGE (a key that had more is read again at once)
RINGS_PER_ROUND = 5000  # rings taken in before the streams they name are read
SUBSCRIBE_CHUNK = 1000  # channels per SUBSCRIBE / UNSUBSCRIBE command
_RETRY_S = 1.0
_WAIT = object()  # (`_found`: nothing yet, time left)
WAKE_PREFIX = "chatworker:live-wake:"
RUNG_PREFIX = "chatworker:live-rung:"

Row = tuple[str, dict[str, str]]  # (entry id, fields), as redis-py returns them


def rung(key: str) -> str:
    """The pub/sub channel a publisher rings when it appends to the stream `key`."""
    return RUNG_PREFIX + key


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

    def forget(self) -> None:
        """Redis failed: what was read may be gone with it (a restart keeps no stream), so
        only what is read after the cursor from now on is vouched for."""
        self.floor = parse_id(self.cursor)
        self.ids.clear()
        self.rows.clear()


class Multiplexer:
    """Blocking reads of many stream keys through one reader (see the module's docstring)."""

    def __init__(self, client: redis.Redis, *, block_ms: int = BLOCK_MS) -> None:
        self.redis = client
        self.block_ms = block_ms
        self.wake_channel = f"{WAKE_PREFIX}{uuid.uuid4()}"
        self._lock = threading.Lock()
        self._feeds: dict[str, _Feed] = {}
        self._error: Exception | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # rounds that read streams (for tests and benchmarks)
        self.keys_read = 0  # streams read, summed over the rounds
        self._joining: set[str] = set()  # keys followed since the reader last subscribed
        self._dropped_at = 0.0
        self.listening = 0  # keys subscribed to and read once (a follower's ring now reaches it)

    def read(self, key: str, after: str, block: float) -> list[Row] | None:
        """The rows of `key` after `after`, waiting up to `block` seconds for the first; None
        when this reader cannot vouch for what follows `after` (read Redis directly). Raises
        while Redis is failing."""
        position = parse_id(after)
        deadline = time.monotonic() + block
        feed, new = self._feed(key, after, position)
        if new:
            self._wake()  # the reader subscribes to it now, not after the current block
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
                self._joining.add(key)
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
            self.redis.publish(self.wake_channel, "1")
        except Exception:  # the reader is failing too, and will tell the waiters
            log.debug("live reader: could not wake it", exc_info=True)

    def _read_forever(self) -> None:
        while not self._stopped.is_set():
            pubsub = self.redis.pubsub()  # type: ignore[no-untyped-call]
            try:
                self._listen(pubsub)
            except Exception as exc:
                self._fail(exc)
                self._stopped.wait(_RETRY_S)
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

    def _listen(self, pubsub: Any) -> None:
        """Subscribe to the followed keys' rings as they come and go, and read what they ring."""
        pubsub.subscribe(self.wake_channel)
        with self._lock:  # (a new connection: every key followed is subscribed to and read)
            self._joining = set(self._feeds)
        while not self._stopped.is_set():
            # Only what changed: a round's work must not grow with the keys followed.
            with self._lock:
                new, self._joining = self._joining, set()
                gone = self._drop_idle() if time.monotonic() - self._dropped_at > 1.0 else []
            for chunk in _chunks([rung(key) for key in gone]):
                pubsub.unsubscribe(*chunk)
            for chunk in _chunks([rung(key) for key in new]):
                pubsub.subscribe(*chunk)
            due, listening = self._rings(pubsub)
            if due:
                self._read_keys(due)
            if listening is not None:
                self.listening = listening

    def _rings(self, pubsub: Any) -> tuple[set[str], int | None]:
        """The keys to read, and how many keys Redis last said it rings the reader for (None: it
        confirmed no subscription). Waits up to the block for the first message, then takes what
        is there.

        A key is read when rung, and once when Redis confirms its subscription: a ring published
        before the subscription took effect reached nobody, but what it rang for is in the stream
        by then. (Read as soon as SUBSCRIBE is sent, the key can be read before the entry is
        appended while the ring still beats the subscription: Redis may run a command sent later
        on another connection first.) Any message ends the wait, so a wake published before the
        wake channel's own subscription took effect is made up for by its confirmation."""
        due: set[str] = set()
        listening = None
        message = pubsub.get_message(timeout=self.block_ms / 1000)
        while message is not None and len(due) < RINGS_PER_ROUND:
            kind, name = message.get("type"), message.get("channel")
            if isinstance(name, bytes):
                name = name.decode()
            if kind in ("subscribe", "unsubscribe"):
                listening = int(message["data"]) - 1  # (every channel subscribed but the wake)
            if kind in ("message", "subscribe") and str(name).startswith(RUNG_PREFIX):
                due.add(str(name)[len(RUNG_PREFIX) :])
            message = pubsub.get_message(timeout=0)
        return due, listening

    def _read_keys(self, keys: set[str]) -> None:
        """Each key's new entries (one pipeline), into its feed; a key that had `READ_COUNT`
        rows is read again at once."""
        while keys:
            with self._lock:
                cursors = [(key, self._feeds[key].cursor) for key in keys if key in self._feeds]
            pipe = self.redis.pipeline(transaction=False)
            for key, cursor in cursors:
                pipe.xrange(key, min=f"({cursor}", count=READ_COUNT)
            found = pipe.execute()
            self.reads += 1
            self.keys_read += len(cursors)
            keys = set()
            with self._lock:
                if self._error is not None:
                    log.info("live reader: Redis answers again")
                    self._error = None
                for (key, _), rows in zip(cursors, found, strict=True):
                    feed = self._feeds.get(key)
                    if feed is None or not rows:
                        continue
                    feed.add(rows)
                    feed.condition.notify_all()
                    feed.waiting.wake_all()
                    if len(rows) >= READ_COUNT:
                        keys.add(key)

    def _fail(self, exc: Exception) -> None:
        with self._lock:
            if self._error is None and not self._stopped.is_set():
                log.warning("live reader: Redis unavailable (%s); retrying", exc)
            self._error = exc
            for feed in self._feeds.values():
                feed.forget()
                feed.condition.notify_all()
                feed.waiting.wake_all()

    def _drop_idle(self) -> list[str]:
        """(Under the lock, at most once a second.) Forget the keys nobody read for
        `IDLE_SECONDS`; which."""
        now = self._dropped_at = time.monotonic()
        idle = [
            key
            for key, feed in self._feeds.items()
            if feed.waiters == 0 and now - feed.touched > IDLE_SECONDS
        ]
        for key in idle:
            del self._feeds[key]
        return idle

    @property
    def keys(self) -> int:
        """Keys followed now."""
        with self._lock:
            return len(self._feeds)


def _chunks(names: list[str]) -> list[list[str]]:
    return [names[i : i + SUBSCRIBE_CHUNK] for i in range(0, len(names), SUBSCRIBE_CHUNK)]


__all__ = ["RUNG_PREFIX", "Multiplexer", "parse_id", "rung"]
