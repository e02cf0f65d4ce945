"""The live channel: what a turn shows before it is committed (reply deltas, discarded partials)
and the notices that wake readers and workers (a commit, a cancel). Shared by the worker and the
web-app client; never the source of truth (`app/models` and the event log are)."""

from app.live.channel import START, Batch, LiveChannel, Position, open_channel
from app.live.entries import (
    ANY_STREAM,
    CALL,
    RESUMED,
    TEXT,
    CommitNotice,
    Delta,
    Discarded,
    Fragment,
    LiveEntry,
    coalesce,
)

__all__ = [
    "ANY_STREAM",
    "CALL",
    "RESUMED",
    "START",
    "TEXT",
    "Batch",
    "CommitNotice",
    "Delta",
    "Discarded",
    "Fragment",
    "LiveChannel",
    "LiveEntry",
    "Position",
    "coalesce",
    "open_channel",
]
