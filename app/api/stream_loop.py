"""The one loop every stream of the API runs, whatever its dialect: a follower of a conversation
(its committed log after a cursor, then live, with the reply's deltas in between) handed to the
dialect's renderer, which writes each item as server-sent events and says when the stream is over.

    the loop                                   the renderer (one per dialect)
    -----------------------------------------  ------------------------------------------------
    the follower's next batch (on the event    `feed(item, cursor)`: the events an item makes
      loop; only its reads take a thread)        (none, one, several)
    the database does not answer: the stream   (nothing: it keeps its place, the follower its
      pauses `DATABASE_PAUSE_SECONDS`, then      cursor)
      reads again
    the renderer has `ended` (the turn is      `finish()`: the last events (it may read, and is
      over), or the follower ended (its          asked again after a pause of the database)
      `until`, or closed)

The dialects: ours (`streaming.py`), OpenAI's Responses (`responses/`), the AI SDK's UI message
stream (`aisdk/`). A new dialect is a renderer and its routes; `released` gives back what a
stream holds when it ends (the `EventStream`'s `closing`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol

from sse_starlette import ServerSentEvent

from app.api.event_stream import EventStream
from app.api.state import ApiState
from app.client import Cursor, Delta, Discarded, EventView, Following, TurnRecord
from app.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

DATABASE_PAUSE_SECONDS = 1.0
# A stream waits this long on the live channel before it looks around (the log is due): each wake
# costs the loop a turn, and a process may serve thousands of streams. While Redis is down, the
# log is read this often.
STREAM_WAKE_SECONDS = 5.0
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class Renderer(Protocol):
    """A dialect's writing of what a follower hands out."""

    @property
    def ended(self) -> bool:
        """The stream is over (its turn ended, or paused): `finish` is next."""
        ...

    def feed(self, item: EventView | Delta | Discarded, cursor: Cursor) -> list[ServerSentEvent]:
        """The events an item makes (`cursor`: the place right after it)."""
        ...

    async def finish(self, following: Following) -> list[ServerSentEvent]:
        """The last events, once `ended` or once the follower ended. `DatabaseUnavailable`
        pauses the stream, then it is asked again."""
        ...


async def streamed(
    api: ApiState,
    following: Following,
    renderer: Renderer,
    first: Iterable[ServerSentEvent] = (),
) -> AsyncIterator[ServerSentEvent]:
    """`first`, then what `renderer` makes of each item `following` hands out, until the
    renderer or the follower ends, then the renderer's last events. It waits on the event loop;
    only the database reads go to the readers' pool."""
    for event in first:
        yield event
    del first
    while not renderer.ended:
        try:
            items = await following.next_batch(api.read_step)
        except DatabaseUnavailable as exc:
            await _pause(following, exc)
            continue
        if not items:
            break  # the follower ended: its `until`, or closed
        for item, cursor in items:
            for event in renderer.feed(item, cursor):
                yield event
            if renderer.ended:
                break
        # (not held while the next batch is awaited, for minutes maybe: at 10,000 streams each
        # holding its last turn's events was ~250,000 objects for every full collection to walk)
        del items, item, cursor
    while True:
        try:
            last = await renderer.finish(following)
            break
        except DatabaseUnavailable as exc:
            await _pause(following, exc)
    for event in last:
        yield event


async def _pause(following: Following, exc: Exception) -> None:
    log.warning("stream of %s: database unavailable (%s)", following.conversation_id, exc)
    await asyncio.sleep(DATABASE_PAUSE_SECONDS)


def follow_turn(api: ApiState, record: TurnRecord, owner: str | None) -> Following:
    """A follower of a turn's conversation from just before the turn's first event (a turn's
    renderer skips other turns'), then live."""
    return api.client.follow(
        record.conversation.id,
        record.events[0].seq - 1 if record.events else 0,
        until=None,
        poll_interval=STREAM_WAKE_SECONDS,
        log_interval=lambda: api.safety_read_interval(STREAM_WAKE_SECONDS),
        owner=owner,
    )


async def turn_stream(
    api: ApiState,
    owner: str | None,
    opening: Callable[[], tuple[Following, Renderer, list[ServerSentEvent]]],
    headers: dict[str, str] | None = None,
) -> EventStream:
    """A stream counted in for `owner` (`ApiState.open_stream`), opened by `opening` (run in the
    readers' pool: it reads; it gives the follower, the renderer and the first events)."""
    api.open_stream(owner)
    try:
        following, renderer, first = await api.read_step(opening)
    except BaseException:
        api.close_stream(owner)
        raise
    return EventStream(
        streamed(api, following, renderer, first),
        ping=api.settings.api_heartbeat_seconds,
        headers=headers or HEADERS,
        closing=released(api, following, owner),
    )


def released(api: ApiState, following: Following, owner: str | None) -> Callable[[], None]:
    """What a stream's end gives back: its follower, and its place in the stream counts."""

    def release() -> None:
        following.close()
        api.close_stream(owner)

    return release


__all__ = ["Renderer", "follow_turn", "released", "streamed", "turn_stream"]
