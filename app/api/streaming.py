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
latency only (the log is read instead).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sse_starlette import ServerSentEvent

from app.api.schemas import DeltaOut, DiscardedOut, Event
from app.api.state import ApiState
from app.client import Delta, Discarded, EventView, Following
from app.errors import DatabaseUnavailable
from app.vocabulary import DELTA, DISCARDED, EVENT_TYPES, LIVE_TYPES, STREAM_END

log = logging.getLogger(__name__)

# Every committed event goes out as it is, under its own type, and so does every live entry: a
# new event type needs nothing here (tests/unit/test_renderer_coverage.py).
HANDLED = frozenset((*EVENT_TYPES, *LIVE_TYPES))
SKIPPED: frozenset[str] = frozenset()
DATABASE_PAUSE_SECONDS = 1.0


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


async def sse_events(api: ApiState, following: Following) -> AsyncIterator[ServerSentEvent]:
    """The stream's events until the following ends (its `until`) or the reader leaves. It
    waits on the event loop; only its database reads go to the readers' pool. What the stream
    holds is given back by `released`, the `EventStream`'s `closing`."""
    while True:
        try:
            items = await following.next_batch(api.read_step)
        except (DBAPIError, PoolTimeout, DatabaseUnavailable) as exc:
            log.warning("stream of %s: database unavailable (%s)", following.conversation_id, exc)
            await asyncio.sleep(DATABASE_PAUSE_SECONDS)
            continue
        if not items:
            break
        for item, cursor in items:
            yield as_sse(item, str(cursor))
        # (not held while the next batch is awaited, for minutes maybe: at 10,000 streams each
        # holding its last turn's events was ~250,000 objects for every full collection to walk)
        del items, item, cursor
    yield ServerSentEvent(data=json.dumps({"cursor": str(following.cursor)}), event=STREAM_END)


def released(api: ApiState, following: Following, owner: str | None) -> Callable[[], None]:
    """What a stream's end gives back: its follower, and its place in the stream counts."""

    def release() -> None:
        following.close()
        api.close_stream(owner)

    return release
