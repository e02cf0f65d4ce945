"""A server-sent event stream as a plain ASGI response: its own coroutine sends the events and the
pings, one task per stream waits for the client to leave, one task per process for the server's
shutdown.

sse_starlette's `EventSourceResponse` runs four tasks per stream in an anyio task group (the
events, the pings, the server's exit, the client's disconnect) and a cancel scope around every
send: at 10,000 open streams that is 40,000 tasks, and anyio's cancel-scope bookkeeping alone took
a fifth of the API process's CPU (py-spy, `python -m bench --only sse`). Here:

    the response's coroutine:  wait (next event | client left | server stopping), at most the
                               ping interval; an event -> send it, nothing -> send `: ping`
    one task per stream:       `receive()` until `http.disconnect`
    one task per process:      notices the server stopping (uvicorn's exit, as sse_starlette's
                               own watcher sees it) and resolves each open stream's future

Once the head is sent, the rest is handed to `app.api.handoff.Handoff` (the request's frames are
let go: ~13 KB a stream), or runs in place where there is none.

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

from sse_starlette import ServerSentEvent
from sse_starlette.sse import AppStatus
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.api.handoff import hand_off

SHUTDOWN_POLL_SECONDS = 0.5
_open_streams: set[asyncio.Future[str]] = set()  # each stream's end, resolved at the stop
_watched: set[asyncio.AbstractEventLoop] = set()
_watchers: set[asyncio.Task[None]] = set()  # (held: the loop keeps only a weak reference)


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
    """The stream after its head: what `Handoff` runs once the request's frames are gone."""

    __slots__ = ("closing", "events", "ping", "receive")

    def __init__(
        self,
        events: AsyncIterator[ServerSentEvent],
        ping: float,
        closing: Callable[[], None] | None,
        receive: Receive,
    ) -> None:
        self.events, self.ping, self.closing, self.receive = events, ping, closing, receive

    async def abandon(self) -> None:
        await _finish(self.events, self.closing)

    async def run(self, send: Send) -> None:
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        left = asyncio.ensure_future(_client_left(self.receive, ended))
        _stopping(ended)
        upcoming: asyncio.Future[ServerSentEvent] | None = None
        try:
            while True:
                if upcoming is None:
                    upcoming = asyncio.ensure_future(anext(self.events))
                done, _ = await asyncio.wait(
                    (upcoming, ended), timeout=self.ping, return_when="FIRST_COMPLETED"
                )
                if upcoming in done:
                    try:
                        event = upcoming.result()
                    except StopAsyncIteration:
                        upcoming = None
                        break
                    upcoming = None
                    await send(_body(event.encode()))
                elif done:  # the client left, or the server stops
                    break
                else:
                    await send(_body(_ping()))
            if not left.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            _open_streams.discard(ended)
            if upcoming is not None:
                upcoming.cancel()
                with contextlib.suppress(BaseException):
                    await upcoming
            left.cancel()
            await _finish(self.events, self.closing)


def _body(chunk: bytes) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


def _ping() -> bytes:
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}").encode()


async def _client_left(receive: Receive, ended: asyncio.Future[str]) -> None:
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    finally:  # (a `receive` that failed: the connection is gone all the same)
        if not ended.done():
            ended.set_result("left")


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


def _stopping(ended: asyncio.Future[str]) -> None:
    """Have `ended` resolved when the server stops (one watcher task per event loop). Each stream
    waits on its own future: a future shared by 10,000 waits costs each wait's cleanup a scan of
    10,000 callbacks (measured: a quarter of the API's CPU)."""
    if AppStatus.should_exit:
        ended.set_result("stopping")
        return
    _open_streams.add(ended)
    loop = asyncio.get_running_loop()
    if loop not in _watched:
        _watched.add(loop)
        watcher = loop.create_task(_watch_shutdown(loop))
        _watchers.add(watcher)
        watcher.add_done_callback(_watchers.discard)


async def _watch_shutdown(loop: asyncio.AbstractEventLoop) -> None:
    try:
        while not AppStatus.should_exit:
            await asyncio.sleep(SHUTDOWN_POLL_SECONDS)
        for ended in [f for f in _open_streams if f.get_loop() is loop]:
            _open_streams.discard(ended)
            if not ended.done():
                ended.set_result("stopping")
    finally:
        _watched.discard(loop)


__all__ = ["EventStream"]
