"""A turn's stream in another client's dialect: a follower of its conversation fed to that
dialect's pure renderer (`responses/stream.py`, `aisdk/chunks.py`), waiting on the event loop
(only its database reads go to the readers' pool), until the renderer says the turn is over.
A database that stops answering pauses the stream, keeping its place, as our own streams do
(`streaming.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.api.routes.events import STREAM_WAKE_SECONDS
from app.api.state import ApiState
from app.api.streaming import DATABASE_PAUSE_SECONDS
from app.client import Delta, Discarded, EventView, Following, TurnRecord
from app.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

Rendered = dict[str, Any]


class Renderer(Protocol):
    @property
    def ended(self) -> bool: ...

    def feed(self, item: EventView | Delta | Discarded) -> list[Rendered]: ...


class RenderedTurn:
    """One open stream: its follower, its renderer, and what ends it (`finish`: the last
    events, read once the renderer has ended)."""

    def __init__(
        self,
        api: ApiState,
        following: Following,
        renderer: Renderer,
        finish: Callable[[], list[Rendered]],
        owner: str | None = None,
    ) -> None:
        self.api, self.following, self.renderer, self.finish = api, following, renderer, finish
        self.owner = owner  # whose stream it is (counted in by the route)
        self.finished = False

    @classmethod
    def of(
        cls,
        api: ApiState,
        record: TurnRecord,
        renderer: Renderer,
        finish: Callable[[], list[Rendered]],
        owner: str | None,
    ) -> RenderedTurn:
        """The turn's stream: a follower of its conversation from just before its first event
        (the renderer skips other turns'), then live."""
        following = api.client.follow(
            record.conversation.id,
            record.events[0].seq - 1 if record.events else 0,
            until=None,
            poll_interval=STREAM_WAKE_SECONDS,
            log_interval=lambda: api.safety_read_interval(STREAM_WAKE_SECONDS),
            owner=owner,
        )
        return cls(api, following, renderer, finish, owner)

    async def next_events(self) -> list[Rendered]:
        """The next events (waiting for them on the event loop), and the last ones once the
        turn is over; empty when the follower was closed. Only database reads take a thread."""
        out: list[Rendered] = []
        renderer = self.renderer
        while not out and not renderer.ended:
            items = await self.following.next_batch(self.api.read_step)
            if not items:
                break
            for item, _ in items:
                out += renderer.feed(item)
        if renderer.ended:
            out += await self.api.read_step(self.finish)  # (it may read the turn's end)
            self.finished = True
        return out

    async def events(self, first: list[Rendered]) -> AsyncIterator[Rendered]:
        """`first`, then every batch until the end (`close` gives back what the stream holds:
        the `EventStream`'s `closing`)."""
        batch = first
        del first
        while True:
            for event in batch:
                yield event
            if self.finished:
                break
            batch = []  # (the last batch not held while the next one is awaited)
            try:
                batch = await self.next_events()
            except (DBAPIError, PoolTimeout, DatabaseUnavailable) as exc:
                log.warning(
                    "stream of %s: database unavailable (%s)", self.following.conversation_id, exc
                )
                await asyncio.sleep(DATABASE_PAUSE_SECONDS)
                continue
            if not batch:
                break  # the follower was closed

    def close(self) -> None:
        """The stream is over: its follower closed, its place in the stream counts given back."""
        self.following.close()
        self.api.close_stream(self.owner)


__all__ = ["RenderedTurn", "Renderer"]
