"""`app/api/handoff.py`: a stream's rest runs after the middlewares under `Handoff` returned (their
frames let go), sending with the `Handoff`'s own `send` (the middlewares saw the head), reading
with the `receive` the response was given; an inner `Handoff` under an outer one passes through;
without a `Handoff` the rest runs in place; a chain that fails after the hand-over abandons the
rest (what the stream held given back)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.event_stream import EventStream
from app.api.handoff import HANDOFF, Handoff
from tests.unit.test_event_stream import Closed, bodies, source


class Recording:
    """A middleware that notes when its frame ends and wraps `send` (each body tagged)."""

    def __init__(self, app: ASGIApp, log: list[str], *, fail_after: bool = False) -> None:
        self.app, self.log, self.fail_after = app, log, fail_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b"[wrapped]" + message["body"]}
            await send(message)

        await self.app(scope, receive, tagged)
        self.log.append("middleware returned")
        if self.fail_after:
            raise RuntimeError("the chain failed after the head")


def stream_app(closed: Closed, *items: str, released: list[str] | None = None) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        def closing() -> None:
            if released is not None:
                released.append("released")

        stream = EventStream(source(closed, *items), ping=60, closing=closing)
        await stream(scope, receive, send)

    return app


async def call(app: ASGIApp, log: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        log.append(f"sent {message['type']}")
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": "GET"}
    await asyncio.wait_for(app(scope, receive, send), 10)  # type: ignore[arg-type]
    return sent, scope


def test_the_rest_runs_after_the_inner_middlewares_returned_with_the_handoffs_send() -> None:
    closed, log = Closed(), []
    sent, scope = asyncio.run(call(Handoff(Recording(stream_app(closed, "a", "b"), log)), log))
    assert log == [
        "sent http.response.start",
        "middleware returned",  # (its frame is gone before the first event goes out)
        "sent http.response.body",
        "sent http.response.body",
        "sent http.response.body",
    ]
    # the head went through the middleware (it saw it); the events did not
    assert bodies(sent) == [b"data: a\r\n\r\n", b"data: b\r\n\r\n", b""]
    assert closed.closed and HANDOFF not in scope  # (the app was given a copy of it)


def test_an_inner_handoff_under_an_outer_one_passes_through() -> None:
    closed, log = Closed(), []
    inner = Handoff(Recording(stream_app(closed, "a"), log))
    app = Handoff(Recording(inner, log))
    sent, _ = asyncio.run(call(app, log))
    # both middlewares returned before the event went out: the outer one ran the rest
    assert log[:3] == ["sent http.response.start", "middleware returned", "middleware returned"]
    assert bodies(sent) == [b"data: a\r\n\r\n", b""] and closed.closed


def test_without_a_handoff_the_stream_runs_in_place() -> None:
    closed, log = Closed(), []
    sent, _ = asyncio.run(call(Recording(stream_app(closed, "a"), log), log))
    assert log[-1] == "middleware returned" and bodies(sent) == [
        b"[wrapped]data: a\r\n\r\n",
        b"[wrapped]",
    ]
    assert closed.closed


def test_a_chain_that_fails_after_the_hand_over_abandons_the_rest() -> None:
    closed, log, released = Closed(), [], []
    app = Handoff(Recording(stream_app(closed, "a", released=released), log, fail_after=True))
    with pytest.raises(RuntimeError, match="failed after the head"):
        asyncio.run(call(app, log))
    assert log == ["sent http.response.start", "middleware returned"]  # (no event went out)
    # the generator never started (its `finally` never ran): `closing` gave back what it held
    assert not closed.closed and released == ["released"]


def test_the_rest_that_runs_releases_once() -> None:
    closed, log, released = Closed(), [], []
    asyncio.run(call(Handoff(Recording(stream_app(closed, "a", released=released), log)), log))
    assert closed.closed and released == ["released"]


def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])
        assert HANDOFF not in scope

    asyncio.run(Handoff(app)({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"]
