"""A conversation's events as server-sent events: the committed log after the reader's cursor,
then live, with the reply's deltas in between (`ChatClient.follow` decides what and in what
order; this module only writes it as SSE).

    SSE event           id                       data
    ------------------  -----------------------  ------------------------------------------------
    <event type>        the event seq ("12")     the event (`schemas.Event`), e.g. turn.completed
    message.delta       "12:5:8f3a2c1d:7"        a piece of the reply (`schemas.DeltaOut`)
    message.discarded   "12:5:8f3a2c1d:7"        drop what was shown of it (`schemas.DiscardedOut`)
    stream.end          (unchanged)              {"cursor": ...}: the `until` was reached

Each `id` is the cursor that resumes right after its event: a reader that reconnects with
`Last-Event-ID` gets exactly what an uninterrupted one got next, nothing twice, nothing missing.
Comments (`: ping`) keep proxies from closing an idle stream. A database that stops answering
pauses the stream (the reader keeps its place); a live channel that stops answering costs
latency only (the log is read instead). The loop is every dialect's (`stream_loop.py`); this
module is our dialect's renderer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import ServerSentEvent

from app.api.schemas import DeltaOut, DiscardedOut, Event
from app.api.state import ApiState
from app.api.stream_loop import streamed
from app.client import Cursor, Delta, Discarded, EventView, Following
from app.vocabulary import DELTA, DISCARDED, EVENT_TYPES, LIVE_TYPES, STREAM_END

# Every committed event goes out as it is, under its own type, and so does every live entry: a
# new event type needs nothing here (tests/unit/test_renderer_coverage.py).
HANDLED = frozenset((*EVENT_TYPES, *LIVE_TYPES))
SKIPPED: frozenset[str] = frozenset()


def as_sse(item: EventView | Delta | Discarded, cursor: str) -> ServerSentEvent:
    if isinstance(item, EventView):
        body = Event.model_validate(item).model_dump_json(exclude_none=True)
        return ServerSentEvent(data=body, event=item.type, id=cursor)
    if isinstance(item, Delta):
        return ServerSentEvent(
            data=DeltaOut.model_validate(item).model_dump_json(), event=DELTA, id=cursor
        )
    return ServerSentEvent(
        data=DiscardedOut.model_validate(item).model_dump_json(), event=DISCARDED, id=cursor
    )


class OurEvents:
    """Our dialect's renderer (`stream_loop.Renderer`): every item as it is, the follower's
    `until` as `stream.end`. It never ends by itself: its follower does."""

    ended = False

    def feed(self, item: EventView | Delta | Discarded, cursor: Cursor) -> list[ServerSentEvent]:
        return [as_sse(item, str(cursor))]

    async def finish(self, following: Following) -> list[ServerSentEvent]:
        return [
            ServerSentEvent(data=json.dumps({"cursor": str(following.cursor)}), event=STREAM_END)
        ]


def sse_events(api: ApiState, following: Following) -> AsyncIterator[ServerSentEvent]:
    """The stream's events until the following ends (its `until`) or the reader leaves (what
    the stream holds is given back by `stream_loop.released`, the `EventStream`'s `closing`)."""
    return streamed(api, following, OurEvents())


__all__ = ["OurEvents", "as_sse", "sse_events"]
