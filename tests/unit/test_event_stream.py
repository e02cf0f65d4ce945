"""`app/api/event_stream.py`: the SSE response without a task group: its events, its pings, the
client's leaving and the server's stop each end or feed it, and the generator is always closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sse_starlette import ServerSentEvent
from sse_starlette.sse import AppStatus

from app.api import event_stream
from app.api.event_stream import EventStream


class Closed:
    def __init__(self) -> None:
        self.closed = False


def source(closed: Closed, *items: str, then_wait: bool = False) -> AsyncIterator[ServerSentEvent]:
    async def events() -> AsyncIterator[ServerSentEvent]:
        try:
            for item in items:
                yield ServerSentEvent(data=item)
            if then_wait:
                await asyncio.Event().wait()  # a quiet stream: nothing more, ever
        finally:
            closed.closed = True

    return events()


async def run(
    response: EventStream, *, method: str = "GET", leave_after: float | None = None
) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    loop = asyncio.get_running_loop()
    leaves = None if leave_after is None else loop.time() + leave_after

    async def receive() -> dict[str, Any]:  # (as a server's: a wait cut short can be asked again)
        if leaves is None:
            await asyncio.Event().wait()
        await asyncio.sleep(max(0.0, (leaves or 0) - loop.time()))
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method}
    await asyncio.wait_for(response(scope, receive, send), 10)  # type: ignore[arg-type]
    return sent


def bodies(sent: list[dict[str, Any]]) -> list[bytes]:
    return [m["body"] for m in sent if m["type"] == "http.response.body"]


def test_the_events_then_the_end_of_the_body_and_the_generator_closed() -> None:
    closed = Closed()
    sent = asyncio.run(run(EventStream(source(closed, "a", "b"), ping=60)))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    assert bodies(sent) == [b"data: a\r\n\r\n", b"data: b\r\n\r\n", b""]
    assert sent[-1]["more_body"] is False and closed.closed


def test_a_quiet_stream_is_pinged_and_a_client_that_leaves_ends_it() -> None:
    closed = Closed()
    stream = EventStream(source(closed, "a", then_wait=True), ping=0.05)
    sent = asyncio.run(run(stream, leave_after=0.4))
    chunks = bodies(sent)
    assert chunks[0] == b"data: a\r\n\r\n"
    assert len(chunks) >= 3 and all(c.startswith(b": ping - ") for c in chunks[1:])
    assert closed.closed  # (its `finally` ran: the follower closed, the stream uncounted)


def test_head_sends_the_headers_only_and_never_runs_the_stream() -> None:
    closed, released = Closed(), []
    stream = EventStream(source(closed, "a"), ping=60, closing=lambda: released.append(1))
    sent = asyncio.run(run(stream, method="HEAD"))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert bodies(sent) == [b""]
    # the generator never ran (nor its `finally`); what the stream held is given back all the same
    assert not closed.closed and released == [1]


@pytest.mark.parametrize("ending", ["its end", "the client leaving", "the server stopping"])
def test_closing_is_called_once_however_the_stream_ends(
    ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_stream, "TICK_SECONDS", 0.01)
    released: list[int] = []
    stream = EventStream(
        source(Closed(), "a", then_wait=ending != "its end"),
        ping=60,
        closing=lambda: released.append(1),
    )

    async def main() -> None:
        running = asyncio.ensure_future(
            run(stream, leave_after=0.1 if ending == "the client leaving" else None)
        )
        if ending == "the server stopping":
            await asyncio.sleep(0.1)
            monkeypatch.setattr(AppStatus, "should_exit", True)
        await running

    asyncio.run(main())
    assert released == [1]


def test_the_server_stopping_ends_every_open_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_stream, "TICK_SECONDS", 0.01)
    closed = Closed()

    async def main() -> list[dict[str, Any]]:
        running = asyncio.ensure_future(run(EventStream(source(closed, then_wait=True), ping=60)))
        await asyncio.sleep(0.2)
        assert not running.done()
        monkeypatch.setattr(AppStatus, "should_exit", True)
        return await running

    sent = asyncio.run(main())
    assert bodies(sent) == [b""] and closed.closed


def test_a_receive_that_fails_ends_the_stream_as_a_client_that_left() -> None:
    closed = Closed()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.1)
        raise OSError("connection reset")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    stream = EventStream(source(closed, "a", then_wait=True), ping=60)
    asyncio.run(asyncio.wait_for(stream({"type": "http"}, receive, send), 10))  # type: ignore[arg-type]
    assert bodies(sent)[0] == b"data: a\r\n\r\n" and closed.closed


def test_a_ping_comes_only_after_a_quiet_ping_interval() -> None:
    async def busy_then_quiet() -> AsyncIterator[ServerSentEvent]:
        for n in range(8):  # an event every 0.03 s for 0.24 s: never 0.1 s of quiet
            yield ServerSentEvent(data=str(n))
            await asyncio.sleep(0.03)
        await asyncio.Event().wait()

    sent = asyncio.run(run(EventStream(busy_then_quiet(), ping=0.1), leave_after=0.5))
    chunks = bodies(sent)
    first_ping = next(n for n, c in enumerate(chunks) if c.startswith(b": ping"))
    assert first_ping == 8  # (all eight events, then the pings of the quiet that followed)
    assert all(c.startswith(b": ping") for c in chunks[8:])


def test_a_cancel_that_is_not_the_streams_own_is_passed_on_and_still_releases() -> None:
    released: list[int] = []
    stream = EventStream(
        source(Closed(), "a", then_wait=True), ping=60, closing=lambda: released.append(1)
    )

    async def main() -> None:
        running = asyncio.ensure_future(run(stream))
        await asyncio.sleep(0.1)
        running.cancel()  # (the server cancelling the request's task)
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    assert released == [1]
