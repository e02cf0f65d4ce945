"""A response's events as server-sent events (`stream=true`): a follower of its conversation from
just before its turn's first event, rendered by `stream.ResponseEvents` and run by the API's one
stream loop (`stream_loop.py`), the events after `starting_after` written."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from sse_starlette import ServerSentEvent

from app.api.auth import Caller
from app.api.event_stream import EventStream
from app.api.responses import lookup
from app.api.responses.ids import ResponseId
from app.api.responses.objects import initial_object, response_object, tools_of
from app.api.responses.stream import ResponseEvents
from app.api.state import ApiState
from app.api.stream_loop import Renderer, follow_turn, turn_stream
from app.client import Cursor, Delta, Discarded, EventView, Following, TurnRecord


class Writer(Protocol):
    """How another dialect writes a response's events as server-sent events; `ended` once it
    wrote its last (early, on an error it cannot go on from)."""

    @property
    def ended(self) -> bool: ...

    def __call__(self, events: list[dict[str, Any]]) -> list[ServerSentEvent]: ...


async def stream(
    api: ApiState,
    caller: Caller,
    response: ResponseId,
    starting_after: int | None,
    writer: Callable[[TurnRecord], Writer] | None = None,
) -> EventStream:
    """The response's events as server-sent events: a follower of its conversation from just
    before its turn's first event, rendered by `stream.ResponseEvents`, those after
    `starting_after` written (by `writer(record)`, another dialect's, if given)."""
    after = -1 if starting_after is None else starting_after

    def opening() -> tuple[Following, Renderer, list[ServerSentEvent]]:
        return _open(api, caller, response, after, writer)

    return await turn_stream(api, caller.owner, opening)


def _open(
    api: ApiState,
    caller: Caller,
    response: ResponseId,
    after: int,
    writer: Callable[[TurnRecord], Writer] | None,
) -> tuple[Following, Renderer, list[ServerSentEvent]]:
    """The response's renderer, a follower of its conversation, and its first events."""
    record = lookup.record_of(api, caller, response)
    servers = lookup.servers_of(api)
    events = ResponseEvents(response, initial_object(record, response, servers))
    first = events.begin(record.turn, tools_of(record, servers))

    def final() -> dict[str, Any]:
        """The response as it ended: at the turn's end, from its terminal event (no read); at
        a pause, read."""
        if events.final_turn is None:
            ended = lookup.record_of(api, caller, response)
        else:
            ended = TurnRecord(events.final_turn, record.conversation, events.events)
        return response_object(ended, response, servers)

    written = _Written(api, events, after, final, None if writer is None else writer(record))
    return follow_turn(api, record, caller.owner), written, written.written(first)


class _Written:
    """`ResponseEvents` as the stream's renderer: its events after `after`, each as an SSE
    event of its type; at the end, the response as it ended (`final`, read in the readers'
    pool)."""

    def __init__(
        self,
        api: ApiState,
        events: ResponseEvents,
        after: int,
        final: Callable[[], dict[str, Any]],
        writer: Writer | None,
    ) -> None:
        self.api, self.events, self.after, self.final = api, events, after, final
        self.writer = writer

    @property
    def ended(self) -> bool:
        return self.events.ended or (self.writer is not None and self.writer.ended)

    def feed(self, item: EventView | Delta | Discarded, cursor: Cursor) -> list[ServerSentEvent]:
        return self.written(self.events.feed(item))

    async def finish(self, following: Following) -> list[ServerSentEvent]:
        if not self.events.ended or (self.writer is not None and self.writer.ended):
            return []  # (the follower was closed)
        final = await self.api.read_step(self.final)
        return self.written(self.events.finish(final))

    def written(self, events: list[dict[str, Any]]) -> list[ServerSentEvent]:
        if self.writer is not None:
            return self.writer(events)
        return [
            ServerSentEvent(data=json.dumps(event), event=event["type"])
            for event in events
            if event["sequence_number"] > self.after
        ]
