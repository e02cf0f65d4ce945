"""The reading half of `ChatClient`: a conversation, a page of them, a turn, the event log, and
following it live (`Following`), or waiting on it (a turn's end, the next events).

Each read runs in one transaction of its own; an `owner` sees only its conversations (another's
is not found). Nothing here writes.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from typing import Any

from sqlalchemy import Connection, Engine

from app.client.checks import (
    check_cursor,
    check_page_size,
    parse_conversation_id,
    parse_turn_id,
)
from app.client.following import REST, TURN_END, UNTIL, Following, LogInterval, Offload
from app.client.merge import Cursor
from app.client.store import conversations, reads
from app.client.store.loop_store import LoopStore
from app.client.views import (
    ConversationPage,
    ConversationView,
    EventPage,
    EventView,
    FinishedTurn,
    TurnRecord,
    TurnView,
)
from app.config import Settings
from app.errors import InvalidRequest
from app.live import LiveChannel, open_channel


class ChatReader:
    """What `ChatClient` reads and follows (its base: construct a `ChatClient`)."""

    settings: Settings
    engine: Engine
    reads: Engine  # the engine in autocommit, for reads (`app.db.autocommit_reads`)
    loop_store: LoopStore | None  # the hot statements, awaited on an event loop (PostgreSQL)
    _live: LiveChannel | None

    @property
    def live(self) -> LiveChannel:
        """The live channel (Redis at `REDIS_URL`, else this process's hub), opened on first use."""
        if self._live is None:
            self._live = open_channel(self.settings.redis_url)
        return self._live

    def list_conversations(
        self, *, owner: str | None = None, limit: int = 20, before: uuid.UUID | str | None = None
    ) -> ConversationPage:
        """The owner's conversations (everyone's for None), newest first, without messages;
        `before` is the previous page's `next_before`."""
        limit = check_page_size(limit)
        mark = None if before is None else parse_conversation_id(before)
        with self.reads.connect() as connection:
            found = reads.list_conversations(connection, owner, limit + 1, mark)
        more = len(found) > limit
        return ConversationPage(found[:limit], found[limit - 1].id if more else None)

    def follow(
        self,
        conversation_id: uuid.UUID | str,
        after: Cursor | int | str = 0,
        *,
        until: str | None = REST,
        turn_id: uuid.UUID | str | None = None,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        log_interval: LogInterval | None = None,
        owner: str | None = None,
    ) -> Following:
        """The conversation's committed events after the cursor `after`, then live as they
        happen, with the reply's deltas in between: iterate it (it blocks), resume from its
        `cursor` after any item. Stops when the conversation rests (`until='rest'`), after the
        followed turn's terminal event (`'turn_end'`: `turn_id`, or the next turn to end), or
        never (None). The channel is read `poll_interval` seconds at a time, and, while it is
        quiet, the committed log every `log_interval` (default: `poll_interval`; a function: asked
        at each read, so a server can stretch it as its streams grow) in case a commit notice
        was lost. `InvalidCursor` for a cursor that is malformed, negative or
        beyond the last event; `ConversationNotFound`."""
        following = self._following(
            conversation_id,
            after,
            until=until,
            turn_id=turn_id,
            timeout=timeout,
            poll_interval=poll_interval,
            log_interval=log_interval,
        )
        # Bad ids and cursors, now.
        self.events(following.conversation_id, after=following.cursor.after, limit=1, owner=owner)
        return following

    async def afollow(
        self,
        conversation_id: uuid.UUID | str,
        after: Cursor | int | str = 0,
        *,
        until: str | None = REST,
        turn_id: uuid.UUID | str | None = None,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        log_interval: LogInterval | None = None,
        owner: str | None = None,
        offload: Offload[Any],
    ) -> Following:
        """`follow` opened on an event loop (its check read awaited as `aevents`'s)."""
        following = self._following(
            conversation_id,
            after,
            until=until,
            turn_id=turn_id,
            timeout=timeout,
            poll_interval=poll_interval,
            log_interval=log_interval,
        )
        await self.aevents(
            following.conversation_id, following.cursor.after, 1, owner=owner, offload=offload
        )
        return following

    def _following(
        self,
        conversation_id: uuid.UUID | str,
        after: Cursor | int | str,
        *,
        until: str | None,
        turn_id: uuid.UUID | str | None,
        timeout: float | None,
        poll_interval: float,
        log_interval: LogInterval | None,
    ) -> Following:
        """A `Following` of checked arguments (`InvalidRequest`, `InvalidCursor`,
        `ConversationNotFound` for a malformed id), not yet read."""
        conversation_id = parse_conversation_id(conversation_id)
        cursor = Cursor.parse(after)
        if until not in UNTIL:
            raise InvalidRequest(f"until must be 'rest', 'turn_end' or None, not {until!r}")
        if not poll_interval > 0:
            raise InvalidRequest(f"poll_interval must be > 0 seconds, not {poll_interval!r}")
        if (
            log_interval is not None
            and not callable(log_interval)
            and not log_interval >= poll_interval
        ):
            raise InvalidRequest(
                f"log_interval must be >= poll_interval ({poll_interval}), not {log_interval!r}"
            )
        return Following(
            self,
            conversation_id,
            cursor,
            until=until,
            turn_id=None if turn_id is None else parse_turn_id(turn_id),
            timeout=timeout,
            poll_interval=poll_interval,
            log_interval=log_interval,
        )

    def get_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """A turn's status, error, usage and times; `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.reads.connect() as connection:
            return reads.read_owned_turn(connection, turn_id, owner)

    async def aget_turn(
        self, turn_id: uuid.UUID | str, *, owner: str | None = None, offload: Offload[Any]
    ) -> TurnView:
        """`get_turn` on an event loop (awaited there as `aevents`, else in `offload`)."""
        if self.loop_store is None:
            turn: TurnView = await offload(functools.partial(self.get_turn, turn_id, owner=owner))
            return turn
        return await self.loop_store.turn(parse_turn_id(turn_id), owner)

    def wait_for_turn(
        self,
        turn_id: uuid.UUID | str,
        timeout: float,
        *,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> FinishedTurn:
        """The turn once it has ended (or after `timeout` seconds, still going) with the
        messages it committed (`log_interval` as `follow`'s); `TurnNotFound`."""
        turn = self.get_turn(turn_id, owner=owner)
        if not turn.is_finished:
            following = self.follow(
                turn.conversation_id,
                0,
                until=TURN_END,
                turn_id=turn.id,
                timeout=timeout,
                log_interval=log_interval,
            )
            with contextlib.suppress(TimeoutError):
                for _ in following:
                    pass
        with self.reads.connect() as connection:
            turn = reads.read_turn(connection, turn.id)
            committed = reads.turn_messages(connection, turn.id)
            shown = reads.with_versions(connection, turn.conversation_id, committed)
            return FinishedTurn(turn, shown, turn.is_finished)

    def turn_record(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnRecord:
        """The turn, its conversation's setup and every event it committed (with the messages
        they name), as of one moment; `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.engine.connect() as connection:
            # One snapshot for its statements: under READ COMMITTED each took its own, and a
            # pause committed between the turn's read and its events' was an event of a turn
            # still running (the AI SDK's stream took the pause for one answered, and never
            # ended).
            connection.execution_options(isolation_level=_snapshot(connection))
            with connection.begin():
                conversation_id = reads.conversation_of_turn(connection, turn_id, owner)
                turn = reads.read_turn(connection, turn_id)
                setup = reads.read_conversation(connection, conversation_id, None, messages=False)
                return TurnRecord(turn, setup, reads.turn_events(connection, turn_id))

    def current_turn(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """The conversation's current (or last) turn; None before the first message."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.reads.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = reads.current_turn(connection, conversation_id)
            if turn is None:
                conversations.status_of(connection, conversation_id)  # ConversationNotFound
            return turn

    def events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        owner: str | None = None,
    ) -> EventPage:
        """Committed events with `seq > after` (at most `limit`), oldest first; `InvalidCursor`
        for a negative cursor or one beyond the last event."""
        conversation_id = parse_conversation_id(conversation_id)
        after, limit = check_cursor(after, limit)
        with self.reads.connect() as connection:
            return reads.read_events(connection, conversation_id, after, limit, owner)

    async def aevents(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        owner: str | None = None,
        offload: Offload[Any],
    ) -> EventPage:
        """`events` on an event loop: awaited there on the loop's own connections where the
        database's driver has an async side (`loop_store`), else `events` in `offload`."""
        if self.loop_store is None:
            page: EventPage = await offload(
                functools.partial(self.events, conversation_id, after, limit, owner=owner)
            )
            return page
        conversation_id = parse_conversation_id(conversation_id)
        after, limit = check_cursor(after, limit)
        return await self.loop_store.events(conversation_id, after, limit, owner)

    def wait_for_events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        wait: float = 0.0,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> EventPage:
        """`events`, but when none is committed after `after` yet, wait up to `wait` seconds
        for the first (a long poll; `log_interval` as `follow`'s); the page may still be
        empty."""
        page = self.events(conversation_id, after, limit, owner=owner)
        if page.events or wait <= 0:
            return page
        following = self._long_poll(conversation_id, after, wait, log_interval)
        try:
            if not any(isinstance(item, EventView) for item in following):
                return page  # pragma: no cover (until=None: it ends by timing out)
        except TimeoutError:
            return page
        finally:
            following.close()
        return self.events(conversation_id, after, limit, owner=owner)

    def _long_poll(
        self, conversation_id: uuid.UUID | str, after: int, wait: float, log_interval: float | None
    ) -> Following:
        """What a long poll follows: the log after `after`, until `wait` runs out."""
        poll = min(1.0, wait)
        return self.follow(
            conversation_id,
            after,
            until=None,
            timeout=wait,
            poll_interval=poll,
            log_interval=None if log_interval is None else max(log_interval, poll),
        )

    def get_conversation(
        self,
        conversation_id: uuid.UUID | str,
        after_seq: int | None = None,
        *,
        owner: str | None = None,
        all_versions: bool = False,
        messages: bool = True,
    ) -> ConversationView:
        """Status, error, setup, counters and the messages of the active path with `seq >
        after_seq` (all if None), each with its versions (`siblings`); with `all_versions`,
        every branch's messages (`active` says which are on the path); without `messages`, none
        (the setup alone: a long transcript is not read)."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.reads.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
            return reads.read_conversation(
                connection,
                conversation_id,
                after_seq,
                messages=messages,
                all_versions=all_versions,
            )


def _snapshot(connection: Connection) -> str:
    """The isolation level whose transaction reads one snapshot (SQLite's are all serialized)."""
    return "REPEATABLE READ" if connection.dialect.name == "postgresql" else "SERIALIZABLE"


async def await_events(
    client: ChatReader,
    conversation_id: uuid.UUID | str,
    after: int = 0,
    limit: int = 100,
    *,
    wait: float = 0.0,
    log_interval: float | None = None,
    owner: str | None = None,
    offload: Offload[Any],
) -> EventPage:
    """`client.wait_for_events` on an event loop: the wait holds no thread, the database reads
    are awaited (`aevents`: on the loop, or in `offload`, the API's readers' pool)."""
    page = await client.aevents(conversation_id, after, limit, owner=owner, offload=offload)
    if page.events or wait <= 0:
        return page
    following = client._long_poll(conversation_id, after, wait, log_interval)
    try:
        while items := await following.next_batch(offload):
            if any(isinstance(item, EventView) for item, _ in items):
                break
        else:  # pragma: no cover (until=None: it ends by timing out)
            return page
    except TimeoutError:
        return page
    finally:
        following.close()
    return await client.aevents(conversation_id, after, limit, owner=owner, offload=offload)


__all__ = ["ChatReader", "await_events"]
