"""A server-sent event stream as a plain ASGI response: its own coroutine sends the events, one
task per stream waits for the client to leave, one task per event loop sends the pings and ends
the streams at the server's shutdown.

sse_starlette's `EventSourceResponse` runs four tasks per stream in an anyio task group (the
events, the pings, the server's exit, the client's disconnect) and a cancel scope around every
send: at 10,000 open streams that is 40,000 tasks, and anyio's cancel-scope bookkeeping alone took
a fifth of the API process's CPU (py-spy, `python -m bench --only sse`). Here:

    the response's coroutine:  the next event -> send it, until the events end (or it is
                               cancelled: the client left, the server stops)
    one task per stream:       `receive()` until `http.disconnect` (then the stream is ended)
    one task per event loop:   the tender: a `: ping` to each stream quiet for its ping
                               interval; at the server's stop (uvicorn's exit, as sse_starlette's
                               own watcher sees it), each open stream ended

Once the head is sent, the rest is handed to `app.api.handoff.Handoff` (the request's frames are
let go), or runs in place where there is none.

The wire format is sse_starlette's (`ServerSentEvent.encode`). When the stream is over (its
generator's end, the client's leaving, the server's stop, a HEAD, a hand-over abandoned), the
generator is closed and `closing` called, once: what the stream holds is given back there (the
follower, the stream count), not in the generator's `finally`, which a generator that never
started does not run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sse_starlette import ServerSentEvent
from sse_starlette.sse import AppStatus
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.api.handoff import hand_off

TICK_SECONDS = 0.5  # the tender looks at least this often (the server's stop, the pings)
_tended: dict[asyncio.AbstractEventLoop, set[_Streaming]] = {}  # each loop's open streams
_tenders: set[asyncio.Task[None]] = set()  # (held: the loop keeps only a weak reference)
_pinging: set[asyncio.Future[None]] = set()


class EventStream(StreamingResponse):
    """`text/event-stream` of `events`, a `: ping` comment after `ping` seconds of quiet."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[ServerSentEvent],
        *,
        ping: float,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,  # (FastAPI's OpenAPI reads the default off the signature)
        closing: Callable[[], None] | None = None,
    ) -> None:
        super().__init__((), status_code, headers, "text/event-stream")  # (the events: below)
        self.events = events
        self.ping = ping
        self.closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        if scope.get("method", "GET").upper() == "HEAD":  # headers only: a stream never ends
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await _finish(self.events, self.closing)
            return
        rest = _Streaming(self.events, self.ping, self.closing, receive)
        if not hand_off(scope, rest):  # (no `Handoff` above: the stream runs here)
            await rest.run(send)


class _Streaming:
    """The stream after its head: what `Handoff` runs once the request's frames are gone.

    Its coroutine pulls the events and sends them, nothing in between; a guard task beside it
    waits for the client to leave; the loop's tender pings it after `ping` seconds without a
    send. The client's leaving and the server's stop end the stream by cancelling its coroutine
    (`end`), which then closes as usual. Nothing is made per wait or per ping interval that
    lives for it: objects that live that long outlast two young collections and each counts
    toward the next full one, which at 10,000 streams stopped the loop for over a second every
    ~50 s (gc callbacks, `python -m bench --only sse`)."""

    __slots__ = ("closing", "ending", "events", "last_sent", "main", "ping", "receive", "send")

    def __init__(
        self,
        events: AsyncIterator[ServerSentEvent],
        ping: float,
        closing: Callable[[], None] | None,
        receive: Receive,
    ) -> None:
        self.events, self.ping, self.closing, self.receive = events, ping, closing, receive
        self.ending: str | None = None  # why it ends: "left", "stopping", "ended", "over"
        self.main: asyncio.Task[Any] | None = None
        self.send: Send | None = None
        self.last_sent = 0.0

    async def abandon(self) -> None:
        await _finish(self.events, self.closing)

    def end(self, why: str) -> None:
        """End the stream from outside its coroutine (the client left, the server stops):
        cancels it while it waits; nothing once it ends by itself."""
        if self.ending is None and self.main is not None:
            self.ending = why
            self.main.cancel()

    async def run(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        self.main = main = asyncio.current_task()
        assert main is not None
        self.send = send
        self.last_sent = loop.time()
        guard = loop.create_task(self._guard())
        _tend(self)
        try:
            try:
                async for event in self.events:
                    chunk = _body(event.encode())
                    del event  # (not held while the next one is awaited)
                    await send(chunk)
                    del chunk
                    self.last_sent = loop.time()
                self.ending = "ended"
            except asyncio.CancelledError:
                if self.ending is None:  # (not ours: the server's, passed on)
                    raise
                main.uncancel()
            guard.cancel()
            with contextlib.suppress(BaseException):
                await guard
            if self.ending != "left":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self.ending is None:
                self.ending = "over"  # (a send that failed: nothing cancels it any more)
            _tended.get(loop, set()).discard(self)
            guard.cancel()
            await _finish(self.events, self.closing)

    async def _guard(self) -> None:
        """Until the client leaves (a `receive` that fails: gone all the same)."""
        try:
            while (await self.receive())["type"] != "http.disconnect":
                pass
        finally:
            self.end("left")

    def ping_now(self, now: float) -> None:
        """A `: ping` on its way (a task: a client slow to read holds up only its own)."""
        if self.ending is None and self.send is not None:
            self.last_sent = now
            task = asyncio.ensure_future(_ping(self, self.send))
            _pinging.add(task)
            task.add_done_callback(_pinging.discard)


async def _ping(stream: _Streaming, send: Send) -> None:
    if stream.ending is None:  # (the last body may have gone out since: nothing after it)
        with contextlib.suppress(Exception):  # (a client gone: its guard ends the stream)
            await send(_body(_ping_comment()))


def _body(chunk: bytes) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


def _ping_comment() -> bytes:
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}").encode()


async def _finish(
    events: AsyncIterator[ServerSentEvent], closing: Callable[[], None] | None
) -> None:
    """Close the generator, then call `closing`: once per stream, whether the generator ever
    started or not (closing a generator that never started runs none of its code: a release
    in its `finally` would be skipped)."""
    try:
        close = getattr(events, "aclose", None)
        if close is not None:
            with contextlib.suppress(RuntimeError):  # (already in its finally: it ends itself)
                await close()
    finally:
        if closing is not None:
            closing()


def _tend(stream: _Streaming) -> None:
    """Have `stream` pinged when quiet and ended when the server stops, by its loop's tender
    (one task per event loop)."""
    if AppStatus.should_exit:
        stream.end("stopping")
        return
    loop = asyncio.get_running_loop()
    streams = _tended.get(loop)
    if streams is None:
        streams = _tended[loop] = set()
        tender = loop.create_task(_tender(loop, streams))
        _tenders.add(tender)
        tender.add_done_callback(_tenders.discard)
    streams.add(stream)


async def _tender(loop: asyncio.AbstractEventLoop, streams: set[_Streaming]) -> None:
    """Each stream pinged at the first tick after its interval without a send is over (a tick
    every `TICK_SECONDS`, or every shortest ping interval if shorter: one walk of the streams a
    tick, not one per stream's due time); at the server's stop (uvicorn's exit, as
    sse_starlette's own watcher sees it), each ended."""
    try:
        while not AppStatus.should_exit:
            now = loop.time()
            tick = TICK_SECONDS
            for stream in streams:
                if stream.last_sent + stream.ping <= now:
                    stream.ping_now(now)
                tick = min(tick, stream.ping)
            await asyncio.sleep(tick)
        for stream in list(streams):
            streams.discard(stream)
            stream.end("stopping")
    finally:
        _tended.pop(loop, None)


__all__ = ["EventStream"]
