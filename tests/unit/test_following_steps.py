"""The follower's step machine (`app/client/following.py`) walked with scripted reads, in the
order a chaos run produced them: each read it yields (`ReadLive`, `ReadLog`) is answered by the
script, and what it hands out is checked the way the soak checks its followers (every partial
reply shown is closed by its commit or a `Discarded`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import redis

from app.client.following import REST, Following, ReadLive, ReadLog
from app.client.merge import ENDED, RESUMED, Cursor
from app.client.views import EventPage, EventView
from app.live import TEXT, Delta, Discarded, Fragment
from app.live.channel import START, Batch
from tests.soak import open_partials

CONVERSATION = uuid.uuid4()
TURN = uuid.uuid4()
STREAM = "ce805205"  # the dead worker's reply, streamed as message 20
OLD = "1700000000000-"  # entry ids of the Redis that was restarted


def event(seq: int, kind: str, **fields: Any) -> EventView:
    return EventView(seq, kind, CONVERSATION, TURN, datetime.now(UTC), **fields)


def page(events: list[EventView], last_seq: int, status: str) -> EventPage:
    return EventPage(CONVERSATION, events, last_seq, status, last_message_seq=19)


def reply(index: int) -> Delta:
    return Delta(20, STREAM, index, (Fragment(TEXT, 0, 3 * index, "abc"),))


def live(after: str | None) -> tuple[type, Any]:
    return ReadLive, after


def log(after: int) -> tuple[type, Any]:
    return ReadLog, after


def follower(cursor: str, until: str | None = None) -> Following:
    """A follower whose log is read at every quiet read of the channel (no clock in the way)."""
    return Following(
        None,  # type: ignore[arg-type]  # (its reads are the script's)
        CONVERSATION,
        Cursor.parse(cursor),
        until=until,
        poll_interval=1.0,
        log_interval=0.0,
    )


def walk(following: Following, *script: tuple[tuple[type, Any], Any]) -> list[Any]:
    """Run the follower's steps until the script is spent: each read it asks for must be the
    next one scripted (its kind and position), which answers it (an exception is raised in
    it); the items it handed out."""
    reads = list(script)
    while reads:
        steps = following._step()
        sent: Any = None
        error: Exception | None = None
        while True:
            try:
                io = steps.send(sent) if error is None else steps.throw(error)
            except StopIteration:
                break
            assert reads, f"the follower read {io} past the script"
            (kind, after), answer = reads.pop(0)
            assert isinstance(io, kind) and io.after == after, (io, kind, after)
            sent, error = (None, answer) if isinstance(answer, Exception) else (answer, None)
    return [item for item, _ in following.ready()]


def test_a_dead_reply_a_restarted_redis_hands_again_is_never_left_open() -> None:
    """The soak's story. A worker streams message 20 and is SIGKILLed as its user cancels; the
    follower has shown two deltas. Another worker's recovery claim ends the turn (`turn.resumed`,
    then `turn.cancelled`: the cancel was requested) while Redis is down, so its
    `Discarded(ANY_STREAM, RESUMED)` and its notices are lost; the follower, cut off from the
    channel, reads the log and drops the partial on `turn.resumed`. Redis comes back empty. The
    follower reconnects from its cursor: nothing is retained, and the next read from the start
    hands it the dead reply's deltas again (the process's reader had kept them from the old
    Redis). Nothing would ever discard them: the conversation rests, no message 20 comes."""
    first = follower("40")
    handed = walk(
        first,
        (live(None), Batch(OLD + "0", [])),
        (log(40), page([], 40, "processing")),
        (live(OLD + "0"), Batch(OLD + "2", [reply(0), reply(1)])),
        (live(OLD + "2"), redis.ConnectionError("Redis was killed")),
        (
            log(40),
            page(
                [
                    event(41, "turn.cancel_requested"),
                    event(42, "turn.resumed", attempt=2),
                    event(43, "turn.cancelled"),
                    event(44, "status.changed", status="idle"),
                ],
                44,
                "idle",
            ),
        ),
    )
    assert handed[:2] == [reply(0), reply(1)]
    assert handed[3] == Discarded(20, STREAM, RESUMED)
    assert first.cursor == Cursor(44)

    again = follower(str(first.cursor))  # (the soak's followers reconnect every few items)
    handed += walk(
        again,
        (live(None), Batch(START, [])),  # Redis is back, empty
        (log(44), page([], 44, "idle")),
        (live(START), Batch(OLD + "2", [reply(0), reply(1)])),  # the old Redis's rows
        (live(OLD + "2"), Batch(OLD + "2", [])),
        (log(44), page([], 44, "idle")),
    )
    assert open_partials(handed) == set()
    assert not any(isinstance(item, Delta) for item in handed[4:])  # nothing forms at rest


def test_a_reader_that_resumes_inside_a_reply_of_a_conversation_at_rest_is_told_to_drop_it() -> (
    None
):
    """The soak's last read of a follower (`until="rest"`) resumed from a cursor in the middle
    of that dead reply: the log has nothing after it and the conversation rests, so the
    partial is dropped before the follower stops, not left open."""
    following = follower(f"44:20:{STREAM}:1", until=REST)
    handed = walk(
        following,
        (live(None), Batch(START, [])),
        (log(44), page([], 44, "idle")),
    )
    assert handed == [Discarded(20, STREAM, ENDED)]
    assert following.cursor == Cursor(44)
    assert next(following, None) is None  # at rest: done
