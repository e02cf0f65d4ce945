"""The live channel's interface, and the one a process uses: Redis when `REDIS_URL` is set (every
process of a deployment shares it), else the process's own in-memory hub (the embedded default,
where the worker runs in the same process as its readers).

Per conversation, an ordered, capped, expiring log of live entries that readers read from any
position (a reader that joins late reads the retained entries first), and one broadcast of cancel
requests that every worker hears. Nothing here is the source of truth: a lost entry costs a
reader only its preview, and readers fall back to the committed event log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.live.entries import LiveEntry

#: Entries kept per conversation (the oldest go first), and how long an idle conversation's are.
MAX_ENTRIES = 2000
TTL_SECONDS = 600.0

Position = str  # where a reader stands in a conversation's entries
START: Position = "0"  # before the first entry


@dataclass(frozen=True)
class Batch:
    """What one read found, and the position to read from next."""

    position: Position
    entries: list[LiveEntry]


class LiveChannel(Protocol):
    def publish(self, batch: Sequence[tuple[uuid.UUID, LiveEntry]]) -> None:
        """Append each entry to its conversation's log, in order. Raises if the channel is down."""
        ...

    def read(self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0) -> Batch:
        """The entries after `after` (every retained one when None), waiting up to `block`
        seconds for the first when there is none yet. Raises if the channel is down."""
        ...

    async def aread(
        self, conversation_id: uuid.UUID, after: Position | None, block: float = 0.0
    ) -> Batch:
        """`read` for an event loop: waiting holds no thread."""
        ...

    def announce_cancel(self, conversation_id: uuid.UUID) -> None:
        """Tell every listening worker that this conversation's turn should stop."""
        ...

    def on_cancel(self, callback: Callable[[uuid.UUID], None]) -> Callable[[], None]:
        """Call `callback(conversation_id)` (from another thread) for every announced cancel;
        returns the function that stops listening."""
        ...

    def ping(self) -> None:
        """Raise if the channel is down (readiness checks)."""
        ...

    def close(self) -> None: ...


def open_channel(redis_url: str | None) -> LiveChannel:
    """Redis at `redis_url`, or this process's hub when there is none."""
    if redis_url:
        from app.live.redis_channel import RedisChannel

        return RedisChannel(redis_url)
    from app.live.memory import process_hub

    return process_hub()


__all__ = [
    "MAX_ENTRIES",
    "START",
    "TTL_SECONDS",
    "Batch",
    "LiveChannel",
    "Position",
    "open_channel",
]
