"""The reading half of `AsyncChatClient`: a conversation, a page of them, a turn, the event log,
and following it live (`AsyncFollowing`), or waiting on it (a turn's end, the next events).

Each read runs in one transaction of its own, in the client's `offload` (the hottest, a turn
and a page of events, awaited on the loop itself where the database's driver has an async side:
`LoopStore`); an `owner` sees only its conversations (another's is not found). Nothing here
writes.
"""

from __future__ import annotations

import contextlib
import uuid

from sqlalchemy import Engine

from app.client.checks import check_cursor, check_page_size, parse_conversation_id, parse_turn_id
from app.client.following import PAGE, REST, TURN_END, UNTIL, AsyncFollowing, Following, LogInterval
from app.client.inline import Offload, inline
from app.client.merge import Cursor
from app.client.store import conversations, event_pages, reads
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
from app.client.wiring import Wiring
from app.config import Settings
from app.db import one_snapshot
from app.errors import InvalidRequest
from app.live import LiveChannel


class AsyncReader:
    """What `AsyncChatClient` reads and follows (its base: construct an `AsyncChatClient`)."""

    wiring: Wiring
    offload: Offload

    @property
    def settings(self) -> Settings:
        return self.wiring.settings

    @property
    def engine(self) -> Engine:
        return self.wiring.engine

    @property
    def loop_store(self) -> LoopStore | None:
        """The hot statements, awaited on an event loop (PostgreSQL; None elsewhere)."""
        return self.wiring.loop_store

    @property
    def live(self) -> LiveChannel:
        """The live channel (Redis at `REDIS_URL`, else this process's hub), opened on first use."""
        return self.wiring.live

    async def list_conversations(
        self, *, owner: str | None = None, limit: int = 20, before: uuid.UUID | str | None = None
    ) -> ConversationPage:
        """The owner's conversations (everyone's for None), newest first, without messages;
        `before` is the previous page's `next_before`."""

        def read() -> ConversationPage:
            size = check_page_size(limit)
            mark = None if before is None else parse_conversation_id(before)
            with self.wiring.reads.connect() as connection:
                found = reads.list_conversations(connection, owner, size + 1, mark)
            more = len(found) > size
            return ConversationPage(found[:size], found[size - 1].id if more else None)

        return await self.offload(read)

    async def follow(
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
    ) -> AsyncFollowing:
        """The conversation's committed events after the cursor `after`, then live as they
        happen, with the reply's deltas in between: iterate it, resume from its `cursor` after
        any item (`ChatClient.follow`'s iterator blocks). Stops when the conversation rests
        (`until='rest'`), after the followed turn's terminal event (`'turn_end'`: `turn_id`, or
        the next turn to end), or never (None). The channel is read `poll_interval` seconds at a
        time, and, while it is quiet, the committed log every `log_interval` (default:
        `poll_interval`; a function: asked at each read, so a server can stretch it as its
        streams grow) in case a commit notice was lost. `InvalidCursor` for a cursor that is
        malformed, negative or beyond the last event; `ConversationNotFound`."""
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
        await self.read_events(
            following.conversation_id, following.cursor.after, 1, owner, self.offload
        )
        return AsyncFollowing(following, self.offload)

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

    async def get_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """A turn's status, error, usage and times; `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        if self.loop_store is not None and self.offload is not inline:
            return await self.loop_store.turn(turn_id, owner)

        def read() -> TurnView:
            with self.wiring.reads.connect() as connection:
                return reads.read_owned_turn(connection, turn_id, owner)

        return await self.offload(read)

    async def wait_for_turn(
        self,
        turn_id: uuid.UUID | str,
        timeout: float,
        *,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> FinishedTurn:
        """The turn once it has ended (or after `timeout` seconds, still going) with the
        messages it committed (`log_interval` as `follow`'s); `TurnNotFound`."""
        turn = await self.get_turn(turn_id, owner=owner)
        if not turn.is_finished:
            following = await self.follow(
                turn.conversation_id,
                0,
                until=TURN_END,
                turn_id=turn.id,
                timeout=timeout,
                log_interval=log_interval,
            )
            with contextlib.suppress(TimeoutError):
                async for _ in following:
                    pass

        def read() -> FinishedTurn:
            with self.wiring.reads.connect() as connection:
                ended = reads.read_turn(connection, turn.id)
                committed = reads.turn_messages(connection, ended.id)
                shown = reads.with_versions(connection, ended.conversation_id, committed)
                return FinishedTurn(ended, shown, ended.is_finished)

        return await self.offload(read)

    async def turn_record(
        self, turn_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnRecord:
        """The turn, its conversation's setup and every event it committed (with the messages
        they name), as of one moment; `TurnNotFound`."""

        def read() -> TurnRecord:
            found = parse_turn_id(turn_id)
            with one_snapshot(self.engine) as connection:  # (its status and events agree)
                conversation_id = reads.conversation_of_turn(connection, found, owner)
                turn = reads.read_turn(connection, found)
                setup = reads.read_conversation(connection, conversation_id, None, messages=False)
                return TurnRecord(turn, setup, event_pages.turn_events(connection, found))

        return await self.offload(read)

    async def current_turn(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """The conversation's current (or last) turn; None before the first message."""

        def read() -> TurnView | None:
            found = parse_conversation_id(conversation_id)
            with self.wiring.reads.connect() as connection:
                reads.check_owner(connection, found, owner)
                turn = reads.current_turn(connection, found)
                if turn is None:
                    conversations.status_of(connection, found)  # ConversationNotFound
                return turn

        return await self.offload(read)

    async def events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        owner: str | None = None,
    ) -> EventPage:
        """Committed events with `seq > after` (at most `limit`), oldest first; `InvalidCursor`
        for a negative cursor or one beyond the last event."""
        return await self.read_events(conversation_id, after, limit, owner, self.offload)

    async def read_events(
        self,
        conversation_id: uuid.UUID | str,
        after: int,
        limit: int,
        owner: str | None,
        offload: Offload,
    ) -> EventPage:
        """`events`, read in `offload` (a follower's own), or awaited on the loop's own
        connections where the database's driver has an async side."""
        conversation_id = parse_conversation_id(conversation_id)
        after, limit = check_cursor(after, limit)
        if self.loop_store is not None and offload is not inline:
            return await self.loop_store.events(conversation_id, after, limit, owner)

        def read() -> EventPage:
            with self.wiring.reads.connect() as connection:
                return event_pages.read_events(connection, conversation_id, after, limit, owner)

        return await offload(read)

    async def log_page(self, conversation_id: uuid.UUID, after: int, offload: Offload) -> EventPage:
        """A follower's read of the committed log after `after`."""
        return await self.read_events(conversation_id, after, PAGE, None, offload)

    async def wait_for_events(
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
        empty. The wait holds no thread; the reads are the client's."""
        page = await self.events(conversation_id, after, limit, owner=owner)
        if page.events or wait <= 0:
            return page
        poll = min(1.0, wait)
        following = await self.follow(
            conversation_id,
            after,
            until=None,
            timeout=wait,
            poll_interval=poll,
            log_interval=None if log_interval is None else max(log_interval, poll),
        )
        try:
            while items := await following.sync.next_batch(self.offload):
                if any(isinstance(item, EventView) for item, _ in items):
                    break
            else:  # pragma: no cover (until=None: it ends by timing out)
                return page
        except TimeoutError:
            return page
        finally:
            following.sync.close()
        return await self.events(conversation_id, after, limit, owner=owner)

    async def get_conversation(
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

        def read() -> ConversationView:
            found = parse_conversation_id(conversation_id)
            with self.wiring.reads.connect() as connection:
                reads.check_owner(connection, found, owner)
                return reads.read_conversation(
                    connection, found, after_seq, messages=messages, all_versions=all_versions
                )

        return await self.offload(read)


__all__ = ["AsyncReader"]
