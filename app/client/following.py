"""Following a conversation as it happens: its committed events from the database, and the live
channel's deltas and notices in between, merged by `merge.LiveMerge`.

The live channel is only a preview and a doorbell: the committed log is read after every commit
notice, and at least every `log_interval` seconds (jittered, so many readers do not read at
once), so a lost notice costs latency, never an event; while the channel is down the log is read
every `poll_interval`.

What to read next is decided without doing any I/O: each step is a generator that yields the
reads it needs (`ReadLive`, `ReadLog`, `Pause`) and is sent their results. `Following` performs
them blocking (an iterator; `next_batch` too, given the `inline` offload); `next_batch` performs
them on the event loop, waiting for the live channel there (`aread`: no thread is held while a
stream waits) and sending only the database reads to a thread (`offload`), so a process follows
thousands of conversations on one loop. `AsyncFollowing` is the asyncio iterator over it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from app.client.inline import Offload, inline, run_inline
from app.client.merge import Cursor, LiveMerge
from app.client.store.journal import AT_REST
from app.client.views import EventView
from app.live import CommitNotice, Delta, Discarded, LiveChannel, LiveEntry, Position
from app.models import ACTION_REQUIRED, TERMINAL_EVENTS

if TYPE_CHECKING:
    from app.client.reader import AsyncReader

log = logging.getLogger(__name__)

FollowItem = EventView | Delta | Discarded
REST = "rest"  # stop once the conversation rests with every event handed out
TURN_END = "turn_end"  # stop after the terminal event (or action.required) of the followed turn
UNTIL = (REST, TURN_END, None)
_TURN_STOPS = (*TERMINAL_EVENTS, ACTION_REQUIRED)
PAGE = 500
T = TypeVar("T")
# How often a quiet follower reads the log: seconds, or a function asked at each read.
LogInterval = float | Callable[[], float]


@dataclass(frozen=True)
class ReadLive:
    """The live channel's entries after `after` (the retained ones when None), waiting up to
    `block` seconds: a `Batch`, or the channel's error. A wait on an event loop, which a close
    cancels at once, may last until `quiet_until` (a `time.monotonic()`: the next log read) when
    that is later: a blocking wait returns every `block` so that a close from another thread is
    noticed, a coroutine need not (10,000 streams each waking every 5 s for nothing cost 2,000
    wake-ups a second)."""

    after: Position | None
    block: float = 0.0
    quiet_until: float = 0.0


@dataclass(frozen=True)
class ReadLog:
    """A page of the committed log after the seq `after`: an `EventPage`."""

    after: int


@dataclass(frozen=True)
class Pause:
    seconds: float


Io = ReadLive | ReadLog | Pause
Steps = Generator[Io, Any, None]


class Following(Iterator[FollowItem]):
    """The conversation's events after a cursor, then live: `EventView`s (committed),
    `Delta`s (a reply as it forms) and `Discarded`s (drop a partial reply). `cursor` is where
    to resume after the last item returned."""

    def __init__(
        self,
        client: AsyncReader,
        conversation_id: uuid.UUID,
        cursor: Cursor,
        *,
        until: str | None = REST,
        turn_id: uuid.UUID | None = None,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        log_interval: LogInterval | None = None,
        channel: LiveChannel | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.conversation_id = conversation_id
        self.until = until
        self.turn_id = turn_id
        self.poll_interval = poll_interval
        # A safety net only: with a channel that answers, every commit comes with its notice.
        self.log_interval: LogInterval = poll_interval if log_interval is None else log_interval
        self._next_log = 0.0
        self._channel = channel
        self._sleep = sleep
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._merge = LiveMerge.starting_at(cursor)
        self._ready: deque[tuple[FollowItem, Cursor]] = deque()
        self._position: Position | None = None  # None: the live channel is not being read
        self._cursor = cursor
        self._status = ""
        self._done = False
        self._closed = False
        self._live_failed = False

    @property
    def cursor(self) -> Cursor:
        """Resume here to get exactly what follows the last item returned."""
        return self._cursor

    def __iter__(self) -> Following:
        return self

    def close(self) -> None:
        """Stop: a `next` in another thread returns within a `poll_interval` (StopIteration)."""
        self._closed = True

    def __next__(self) -> FollowItem:
        while not self._ready:
            if not self._open():
                raise StopIteration
            self._drive(self._step())
        item, self._cursor = self._ready.popleft()
        return item

    async def next_batch(
        self, offload: Offload = asyncio.to_thread
    ) -> list[tuple[FollowItem, Cursor]]:
        """The next items on the event loop (waiting for the first), each with the cursor that
        resumes after it; empty at the end. Only the database reads leave the loop (`offload`);
        with `inline`, every read blocks here (a synchronous client's wait)."""
        while not self._ready:
            if not self._open():
                return []
            if offload is inline:
                self._drive(self._step())
            else:
                await self._adrive(self._step(), offload)
        return self.ready()

    def _open(self) -> bool:
        """Whether there is more to follow; raises TimeoutError past the deadline."""
        if self._done or self._closed:
            return False
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise TimeoutError(
                f"conversation {self.conversation_id} still {self._status or 'running'} "
                f"(resume from cursor {self._cursor})"
            )
        return True

    def ready(self) -> list[tuple[FollowItem, Cursor]]:
        """The items already read and not yet returned (no waiting), each with the cursor that
        resumes after it; `cursor` moves past them."""
        handed = list(self._ready)
        self._ready.clear()
        if handed:
            self._cursor = handed[-1][1]
        return handed

    # --- performing a step's reads: blocking, or on the event loop -----------------------------

    def _drive(self, steps: Steps) -> None:
        sent: Any = None
        error: Exception | None = None
        while True:
            try:
                io = steps.send(sent) if error is None else steps.throw(error)
            except StopIteration:
                return
            sent, error = None, None
            try:
                sent = self._perform(io)
            except Exception as exc:  # (thrown into the step, which decides)
                error = exc

    async def _adrive(self, steps: Steps, offload: Offload) -> None:
        sent: Any = None
        error: Exception | None = None
        while True:
            try:
                io = steps.send(sent) if error is None else steps.throw(error)
            except StopIteration:
                return
            sent, error = None, None
            try:
                sent = await self._aperform(io, offload)
            except Exception as exc:
                error = exc

    def _perform(self, io: Io) -> Any:
        if isinstance(io, ReadLive):
            return self._live().read(self.conversation_id, io.after, io.block)
        if isinstance(io, ReadLog):
            return run_inline(self.client.log_page(self.conversation_id, io.after, inline))
        self._sleep(io.seconds)
        return None

    async def _aperform(self, io: Io, offload: Offload) -> Any:
        if isinstance(io, ReadLive):
            channel = self._live()
            aread = getattr(channel, "aread", None)
            if aread is not None:  # waits on the loop
                block = max(io.block, io.quiet_until - time.monotonic())
                return await aread(self.conversation_id, io.after, block)
            return await offload(partial(channel.read, self.conversation_id, io.after, io.block))
        if isinstance(io, ReadLog):
            return await self.client.log_page(self.conversation_id, io.after, offload)
        await asyncio.sleep(io.seconds)
        return None

    # --- one step: read what is new, merge it (no I/O here: the reads are yielded) -------------

    def _step(self) -> Steps:
        if self._position is None:
            yield from self._start()
            return
        try:
            quiet_until = self._next_log  # (a timeout's deadline comes first)
            if self._deadline is not None:
                quiet_until = min(quiet_until, self._deadline)
            batch = yield ReadLive(self._position, self.poll_interval, quiet_until)
        except Exception as exc:  # the channel is down: the committed log still has it all
            self._lost_live(exc)
            yield from self._read_log()
            return
        self._position = batch.position
        if not batch.entries:  # a quiet interval: ask the database, now and then
            if time.monotonic() >= self._next_log:
                yield from self._read_log()
            return
        # Each commit notice is answered where it stands, with the log as far as it announced:
        # a `turn.resumed` (or a turn's end) read after the deltas of a reply that began after
        # it would drop that reply's partial.
        for part in _cut_after_notices(batch.entries):
            items, news = self._merge.live(part)
            self._hand_out(items)
            if news and not self._done:  # a commit: ask the database
                notice = part[-1]
                assert isinstance(notice, CommitNotice)
                yield from self._read_log(up_to=notice.seq or None)  # (0: a client's, unknown seq)

    def _start(self) -> Steps:
        """The channel's retained entries are read before the log (no notice falls between the
        two), and merged after it (deltas of messages the log has committed are dropped)."""
        retained = None
        try:
            retained = yield ReadLive(None)
        except Exception as exc:
            self._lost_live(exc)
        yield from self._read_log()
        if retained is None:
            if not self._done and not self._ready:
                yield Pause(self.poll_interval)
            return
        self._position = retained.position
        self._live_failed = False
        self._hand_out(self._merge.live(retained.entries)[0])

    def _read_log(self, up_to: int | None = None) -> Steps:
        """Hand out the committed events after the last one handed out; with `up_to`, only
        those up to that seq (the later ones come after the live entries published before
        them, with their own notice or the next quiet interval)."""
        interval = self.log_interval() if callable(self.log_interval) else self.log_interval
        jitter = random.uniform(0.8, 1.2) if interval > self.poll_interval else 1.0
        self._next_log = time.monotonic() + interval * jitter
        while True:
            page = yield ReadLog(self._merge.after)
            last = page.last_seq if up_to is None else min(up_to, page.last_seq)
            whole = last == page.last_seq
            events = page.events if whole else [event for event in page.events if event.seq <= last]
            self._hand_out(self._merge.committed(events, page.last_message_seq if whole else 0))
            self._status = page.status
            if self._merge.after >= last:
                break
        if whole and self._status in AT_REST:  # nothing forms now: a partial shown is dead
            self._hand_out(self._merge.rested())
            if self.until == REST:
                self._done = True

    def _hand_out(self, handed: list[tuple[Any, Cursor]]) -> None:
        for item, cursor in handed:
            if self._done:
                return
            self._ready.append((item, cursor))
            if self.until == TURN_END and self._ends_turn(item):
                self._done = True

    def _ends_turn(self, item: FollowItem) -> bool:
        """A terminal event of the followed turn, or its `action.required`: it waits for the
        user (who may well be the one following)."""
        if not isinstance(item, EventView) or item.type not in _TURN_STOPS:
            return False
        return self.turn_id is None or item.turn_id == self.turn_id

    def _live(self) -> LiveChannel:
        if self._channel is None:
            self._channel = self.client.live
        return self._channel

    def _lost_live(self, exc: Exception) -> None:
        if not self._live_failed:
            log.warning(
                "conversation %s: live channel unavailable (%s); following the committed log",
                self.conversation_id,
                exc,
            )
        self._live_failed = True
        self._position = None


def _cut_after_notices(entries: list[LiveEntry]) -> list[list[LiveEntry]]:
    """The entries of one read, cut after each commit notice."""
    parts: list[list[LiveEntry]] = [[]]
    for entry in entries:
        parts[-1].append(entry)
        if isinstance(entry, CommitNotice):
            parts.append([])
    return [part for part in parts if part]


class AsyncFollowing(AsyncIterator[FollowItem]):
    """`Following` for asyncio: it waits on the event loop (`Following.next_batch`); only its
    database reads run in `offload` (a thread). `sync` iterates the same items blocking."""

    def __init__(self, following: Following, offload: Offload = asyncio.to_thread) -> None:
        self.sync = following
        self._offload = offload
        self._batch: deque[tuple[FollowItem, Cursor]] = deque()
        self._cursor = following.cursor

    @property
    def cursor(self) -> Cursor:
        return self._cursor

    def __aiter__(self) -> AsyncFollowing:
        return self

    async def __anext__(self) -> FollowItem:
        if not self._batch:
            self._batch.extend(await self.sync.next_batch(self._offload))
            if not self._batch:
                raise StopAsyncIteration
        item, self._cursor = self._batch.popleft()
        return item


__all__ = [
    "PAGE",
    "REST",
    "TURN_END",
    "UNTIL",
    "AsyncFollowing",
    "FollowItem",
    "Following",
    "LogInterval",
    "Pause",
    "ReadLive",
    "ReadLog",
]
