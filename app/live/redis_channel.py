"""The live channel on Redis: a capped, expiring Redis Stream per conversation for the entries,
and one pub/sub channel for cancel requests.

Why a Stream and not pub/sub for the entries: a reader that connects (or reconnects) in the
middle of a reply must get the part already sent, and pub/sub keeps nothing; a Stream keeps the
last `MAX_ENTRIES` entries, lets each reader read from its own position (`XREAD` blocks until
there is more), and expires with the conversation's silence (`EXPIRE`, renewed by every write).
Each append also rings the conversation's pub/sub channel, `chatworker:live-rung:<stream key>`:
a process's blocking reads share one reader subscribed to the channels of the keys it follows,
which reads only the streams rung (`multiplex.py`).
Cancel requests are pub/sub: they only matter to the worker holding the turn at that moment, and
a lost one is caught by that worker's next step or heartbeat, which read the committed request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from app.live.channel import MAX_ENTRIES, START, TTL_SECONDS, Batch, Position
from app.live.entries import LiveEntry, decode, encode
from app.live.multiplex import Multiplexer, rung

log = logging.getLogger(__name__)

KEY_PREFIX = "chatworker:live:"
CANCELS = "chatworker:cancels"
READ_COUNT = 5000  # entries one read returns at most (a reader calls again for the rest)
MAX_CONNECTIONS = 10_000
_RECONNECT_S = 1.0
_LISTEN_POLL_S = 1.0  # how often a listener checks whether it was stopped (`close` wakes it)
_CLOSE_WAIT_S = 2.0  # how long `close` waits for each listener (woken by its own channel)


def _batch(rows: Any, since: Position) -> Batch:
    entries = [entry for _, fields in rows if (entry := decode(fields)) is not None]
    return Batch(str(rows[-1][0]) if rows else since, entries)


def stream_key(conversation_id: uuid.UUID) -> str:
    return f"{KEY_PREFIX}{conversation_id}"


class RedisChannel:
    """Entries in `chatworker:live:<conversation id>`, cancels on `chatworker:cancels`."""

    def __init__(self, url: str, max_entries: int = MAX_ENTRIES, ttl: float = TTL_SECONDS) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        # Blocking reads wait at most a few seconds: the socket timeout must outlast them. Each
        # follower blocked in a read holds a connection for as long: the pool allows as many as
        # Redis's own default `maxclients` (redis-py's default of 100 refused the 101st reader).
        self.redis: redis.Redis = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=15,
            socket_connect_timeout=3,
            max_connections=MAX_CONNECTIONS,
        )
        self._listeners: list[tuple[threading.Event, threading.Thread, str]] = []
        self._reader: Multiplexer | None = None
        self._lock = threading.Lock()

    def publish(self, batch: Sequence[tuple[uuid.UUID, LiveEntry]]) -> None:
        if not batch:
            return
        pipe = self.redis.pipeline(transaction=False)
        keys = set()
        for conversation_id, entry in batch:
            key = stream_key(conversation_id)
            keys.add(key)
            pipe.xadd(key, encode(entry), maxlen=self.max_entries, approximate=True)  # type: ignore[arg-type]
        for key in keys:
            pipe.expire(key, int(self.ttl))
            pipe.publish(rung(key), "")  # the readers following it read it now (`multiplex.py`)
        pipe.execute()

    def read(self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0) -> Batch:
        key = stream_key(conversation_id)
        since = after or START
        rows: Any = None
        if after is None:
            rows = self.redis.xrange(key, count=READ_COUNT)
        elif block > 0:  # one reader for every follower of this process
            rows = self._multiplexer().read(key, since, block)
        if rows is None:
            rows = self._read_directly(key, since, block)
        return _batch(rows, since)

    async def aread(
        self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0
    ) -> Batch:
        """`read` on the event loop: a follower's wait is a future the process's one reader
        resolves. The rare reads that go to Redis themselves (the retained entries, a position
        the reader cannot vouch for) run in a thread."""
        if after is None or block <= 0:
            return await asyncio.to_thread(self.read, conversation_id, after, block)
        key = stream_key(conversation_id)
        rows = await self._multiplexer().aread(key, after, block)
        if rows is None:
            rows = await asyncio.to_thread(self._read_directly, key, after, block)
        return _batch(rows, after)

    def _read_directly(self, key: str, since: str, block: float) -> Any:
        milliseconds = round(block * 1000)
        found: Any = self.redis.xread({key: since}, count=READ_COUNT, block=milliseconds or None)
        return found[0][1] if found else []

    def _multiplexer(self) -> Multiplexer:
        with self._lock:
            if self._reader is None:
                self._reader = Multiplexer(self.redis)
            return self._reader

    def announce_cancel(self, conversation_id: uuid.UUID) -> None:
        self.redis.publish(CANCELS, str(conversation_id))

    def on_cancel(self, callback: Callable[[uuid.UUID], None]) -> Callable[[], None]:
        stopped = threading.Event()
        wake = f"{CANCELS}:wake:{uuid.uuid4().hex}"  # this listener's own: `close` rings it
        thread = threading.Thread(
            target=self._listen,
            args=(callback, stopped, wake),
            name="chatworker-cancels",
            daemon=True,
        )
        self._listeners.append((stopped, thread, wake))
        thread.start()
        return stopped.set

    def ping(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        """Stop listening, then close the connections. Each listener is woken by its own channel:
        a worker's graceful stop does not wait out the poll."""
        for stopped, _, wake in self._listeners:
            stopped.set()
            with contextlib.suppress(redis.RedisError):
                self.redis.publish(wake, "")
        for _, thread, _ in self._listeners:
            thread.join(_CLOSE_WAIT_S)
        if self._reader is not None:
            self._reader.close()
        self.redis.close()

    def _listen(
        self, callback: Callable[[uuid.UUID], None], stopped: threading.Event, wake: str
    ) -> None:
        """Subscribe, deliver, and subscribe again after Redis comes back."""
        while not stopped.is_set():
            try:
                with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call]
                    pubsub.subscribe(CANCELS, wake)
                    while not stopped.is_set():
                        message = pubsub.get_message(timeout=_LISTEN_POLL_S)
                        if message is not None and message.get("channel") == CANCELS:
                            _deliver(callback, message.get("data"))
            except Exception as exc:  # Redis went away (or is closing): listen again, never die
                if not stopped.is_set():
                    log.warning("cancel notices: Redis unavailable (%s); retrying", exc)
                stopped.wait(_RECONNECT_S)


def _deliver(callback: Callable[[uuid.UUID], None], data: Any) -> None:
    try:
        conversation_id = uuid.UUID(str(data))
    except ValueError:
        log.warning("cancel notices: ignoring a malformed id %r", data)
        return
    try:
        callback(conversation_id)
    except Exception:  # one bad delivery must not end the listener
        log.exception("cancel notices: the handler failed for %s", conversation_id)


__all__ = ["CANCELS", "KEY_PREFIX", "RedisChannel", "stream_key"]
