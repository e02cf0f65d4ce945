"""A conversation's event log: a JSON page (long-poll with `wait`), or a server-sent stream."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query

from app.api.auth import Authenticated
from app.api.event_stream import EventStream
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.schemas import Event, EventList
from app.api.state import Api
from app.api.stream_loop import STREAM_WAKE_SECONDS, released
from app.api.streaming import sse_events
from app.client import Cursor
from app.client.following import REST, TURN_END

router = APIRouter(prefix="/conversations", tags=["events"], route_class=GuardedRoute)


@router.get(
    "/{conversation_id}/events",
    response_model=EventList,
    responses=documented(400, 401, 404, 422, 429, 503),
)
async def list_events(
    conversation_id: uuid.UUID,
    *,
    caller: Authenticated,
    api: Api,
    after: Annotated[
        int,
        Query(
            description="the last event seq you have (negative or past the end: 400 "
            "invalid_cursor, as the stream's cursor)"
        ),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    wait: Annotated[
        float, Query(ge=0, le=3600, description="seconds to wait for the first new event")
    ] = 0,
) -> EventList:
    """Committed events with `seq > after`, oldest first; with `wait`, a long poll."""
    wait = min(wait, api.settings.api_max_wait_seconds)
    # A long poll (wait > 0) is counted with the streams, for the process and the owner; it
    # waits on the event loop, its database reads in the client's offload.
    reading = api.chat.wait_for_events(
        conversation_id,
        after,
        limit,
        wait=wait,
        log_interval=api.settings.api_log_poll_seconds,
        owner=caller.owner,
    )
    if wait == 0:
        page = await reading
    else:
        api.open_stream(caller.owner)
        try:
            page = await reading
        finally:
            api.close_stream(caller.owner)
    return EventList(
        conversation_id=page.conversation_id,
        data=[Event.model_validate(view) for view in page.events],
        last_seq=page.last_seq,
        status=page.status,
        next_after=page.next_after,
    )


@router.get(
    "/{conversation_id}/stream",
    response_class=EventStream,
    responses=documented(
        400,
        401,
        404,
        422,
        429,
        503,
        also={
            200: {
                "description": "server-sent events: the log after the cursor, then live "
                "(see app/api/streaming.py for the events)",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        },
    ),
)
async def stream_events(
    conversation_id: uuid.UUID,
    *,
    caller: Authenticated,
    api: Api,
    after: Annotated[
        str | None, Query(description="a cursor: an event seq, or an SSE id received before")
    ] = None,
    until: Annotated[
        Literal["rest", "turn_end", "never"],
        Query(description="end after the conversation rests, after the next turn ends, or never"),
    ] = "never",
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="resume after this SSE id")
    ] = None,
) -> EventStream:
    """Replays the committed events after `Last-Event-ID` (or `?after=`, else from the start),
    then continues live: the reply's words as `message.delta`, every event as it commits."""
    cursor = Cursor.parse(last_event_id if last_event_id is not None else (after or 0))
    ends = {"rest": REST, "turn_end": TURN_END, "never": None}[until]
    api.open_stream(caller.owner)
    try:
        following = (
            await api.chat.follow(
                conversation_id,
                cursor,
                until=ends,
                poll_interval=STREAM_WAKE_SECONDS,
                log_interval=lambda: api.safety_read_interval(STREAM_WAKE_SECONDS),
                owner=caller.owner,
            )
        ).sync  # (its items in batches, `next_batch`, the stream's reads in the readers' pool)
    except BaseException:
        api.close_stream(caller.owner)
        raise
    return EventStream(
        sse_events(api, following),
        ping=api.settings.api_heartbeat_seconds,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        closing=released(api, following, caller.owner),
    )
