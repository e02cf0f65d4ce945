"""This worker process's voice on the live channel: a turn's replies as they form, coalesced, and a
notice after each commit, sent in order by one thread so the event loop never waits on Redis.

A reply's first fragment (and any after a quiet interval) goes out at once; the ones that follow
within `flush_interval` seconds are held and sent together as one `Delta`, so a model that streams
a token every few milliseconds costs one channel write per interval, not per token, and a reader
sees the first word as soon as the model gives it.
Before a reply's message is committed its last fragments are flushed; a reply that will not be
committed (retried, cancelled, failed, lease lost) is `Discarded`. Every send is best effort: a
channel that is down costs readers their preview, never an event (they read the committed log).
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import secrets
import threading
import time
import uuid
from typing import Any

from app.live import (
    CALL,
    TEXT,
    CommitNotice,
    Delta,
    Discarded,
    Fragment,
    LiveChannel,
    LiveEntry,
    coalesce,
)

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.05
_WARN_EVERY_S = 60.0

Item = tuple[uuid.UUID, LiveEntry]


class Broadcaster:
    """Sends what this process's turns publish; `reply` makes the sink of one model call."""

    def __init__(self, channel: LiveChannel | None, flush_interval: float = FLUSH_INTERVAL):
        self.channel = channel
        self.flush_interval = flush_interval
        self.sent_entries = 0  # entries the channel accepted
        self.sent_batches = 0  # writes (round trips) they took
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._warned_at = 0.0
        self._lock = threading.Lock()

    def reply(self, conversation_id: uuid.UUID, message_seq: int) -> ReplyStream:
        """The sink of a model call whose reply will be committed as `message_seq` (call it on
        the event loop that runs the call)."""
        return ReplyStream(self, conversation_id, message_seq)

    def committed(self, conversation_id: uuid.UUID, seq: int) -> None:
        """The conversation's log has grown to `seq`: wake its readers."""
        self.put(conversation_id, CommitNotice(seq))

    def discarded(
        self, conversation_id: uuid.UUID, message_seq: int, stream: str, reason: str
    ) -> None:
        self.put(conversation_id, Discarded(message_seq, stream, reason))

    def put(self, conversation_id: uuid.UUID, entry: LiveEntry) -> None:
        if self.channel is None:
            return
        if self._thread is None:
            self._start()
        self._queue.put((conversation_id, entry))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, then stop the sending thread."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(None)
        thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._send_forever, name="chatworker-broadcast", daemon=True
                )
                self._thread.start()

    def _send_forever(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = [first], False
            while True:  # what queued up meanwhile goes in the same write
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._send(batch)
            if stop:
                return

    def _send(self, batch: list[Item]) -> None:
        assert self.channel is not None
        try:
            self.channel.publish(batch)
        except Exception as exc:
            now = time.monotonic()
            if now - self._warned_at > _WARN_EVERY_S:
                log.warning("live channel unavailable (%s): readers fall back to the log", exc)
                self._warned_at = now
            return
        self.sent_entries += len(batch)
        self.sent_batches += 1


class ReplyStream:
    """The `ReplySink` of one model call: fragments coalesced into numbered deltas of a stream
    (a new stream when the call restarts), for the message seq the reply will take."""

    def __init__(
        self, broadcaster: Broadcaster, conversation_id: uuid.UUID, message_seq: int
    ) -> None:
        self.broadcaster = broadcaster
        self.conversation_id = conversation_id
        self.message_seq = message_seq
        self.stream = secrets.token_hex(4)
        self.index = 0  # the next delta's number
        self.attempt = 0  # restarts of the call (a retry's new stream)
        self.text_split: list[int] = []  # the length of each sent delta's text
        self._offsets: dict[tuple[str, int], int] = {}
        self._pending: list[Fragment] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sent_at = -math.inf  # when the last delta went out (time.monotonic)

    def text(self, fragment: str) -> None:
        if fragment:
            self._add(TEXT, 0, fragment, None, None)

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        if fragment or call_id or name:
            self._add(CALL, index, fragment, call_id, name)

    def restart(self, reason: str) -> None:
        """The call starts over: readers drop this stream; the next fragments start a new one."""
        self.abandon(reason)
        self.stream = secrets.token_hex(4)
        self.index = 0
        self.attempt += 1
        self.text_split = []
        self._offsets = {}
        self._sent_at = -math.inf

    def abandon(self, reason: str) -> None:
        """The reply will not be committed as it stood: readers drop what they were shown."""
        self._cancel_timer()
        self._pending = []
        if self.index:
            self.broadcaster.discarded(self.conversation_id, self.message_seq, self.stream, reason)

    def flush(self) -> None:
        """Send the held fragments now (before the reply's message is committed)."""
        self._cancel_timer()
        if not self._pending:
            return
        delta = Delta(
            self.message_seq, self.stream, self.index, coalesce(self._pending), self.attempt
        )
        if delta.text:
            self.text_split.append(len(delta.text))
        self._pending = []
        self.index += 1
        self._sent_at = time.monotonic()
        self.broadcaster.put(self.conversation_id, delta)

    def shape(self) -> dict[str, Any] | None:
        """How the reply was streamed, committed with it (`messages.reply_stream`): the attempt
        and the length of each delta's text, so a replay splits it as the live stream did; None
        when nothing was sent."""
        if not self.index:
            return None
        return {"attempt": self.attempt, "text": list(self.text_split)}

    def _add(self, part: str, index: int, text: str, call_id: str | None, name: str | None) -> None:
        key = (part, index)
        offset = self._offsets.get(key, 0)
        self._offsets[key] = offset + len(text)
        self._pending.append(Fragment(part, index, offset, text, call_id, name))
        if self._timer is not None:
            return
        # A leading-edge throttle: a fragment after a quiet interval (the reply's first above
        # all) goes out at once; the ones that follow it within the interval wait for its end.
        wait = self._sent_at + self.broadcaster.flush_interval - time.monotonic()
        if wait <= 0:
            self.flush()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self.flush)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


__all__ = ["FLUSH_INTERVAL", "Broadcaster", "ReplyStream"]
