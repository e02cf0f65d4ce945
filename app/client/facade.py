"""What a web app calls: create a conversation, submit a message as a turn, follow its events,
poll it, retry a failed turn.

`ChatClient` is synchronous (Django, Flask); `AsyncChatClient` is the same for asyncio (FastAPI,
Starlette) and runs each call in a thread. Each call checks its input (`checks`), runs its SQL
(`commands`, `reads`) in one transaction, and rings the queue (`doorbell`). A bad request raises an
`InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine

from app.client import commands, reads
from app.client.checks import (
    check_busy_policy,
    check_context,
    check_cursor,
    check_idempotency_key,
    check_model,
    check_text,
    check_tool_choice,
    check_tool_names,
    check_tools_offered,
    parse_conversation_id,
    parse_turn_id,
)
from app.client.commands import REJECT, NewTurn
from app.client.doorbell import WAITING, Enqueue, QueueRinger, default_enqueue, ring
from app.client.views import ConversationView, EventPage, Submitted, ToolInfo, TurnView
from app.config import Settings, get_settings
from app.db import make_engine


class ChatClient:
    """The synchronous web-app API over the database and the queue.

    `enqueue` rings a worker for a conversation id. By default: the process's queue (`app.queue`)
    when the settings have a `REDIS_URL`, and nothing at all without one (the turn then waits for
    a worker's recovery sweep; `Submitted.detail` says so).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.engine = engine or make_engine(self.settings.database_url)
        self._enqueue = enqueue if enqueue is not None else default_enqueue(self.settings)

    def create_conversation(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
    ) -> uuid.UUID:
        """A new idle conversation; `tools` are names from `list_tools()`."""
        model = check_model(self.settings.model if model is None else model)
        check_tool_choice(tool_choice)
        names = check_tool_names(tools, tool_choice)
        if instructions is not None:
            check_text(instructions, "instructions", self._limit, allow_empty=True)
        check_context(context)
        conversation_id = uuid.uuid4()
        with self.engine.begin() as connection:
            if names:
                check_tools_offered(names, reads.catalogue_names(connection))
            commands.insert_conversation(
                connection,
                conversation_id,
                model=model,
                instructions=instructions,
                tools=names,
                tool_choice=tool_choice,
                context=context,
            )
        return conversation_id

    def submit_message(
        self,
        conversation_id: uuid.UUID | str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
    ) -> Submitted:
        """Store the user's message as a new turn and start it.

        While a turn runs, `on_busy` decides: `reject` (`ConversationBusy`, naming the running
        turn) or `enqueue` (the turn waits, its message outside the transcript, and starts when
        the running one ends). The same `idempotency_key` with the same text returns the first
        submit's turn (`repeated`) and writes nothing; with another text, `IdempotencyKeyReused`.
        """
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit)
        key = check_idempotency_key(idempotency_key)
        policy = check_busy_policy(on_busy)
        with self.engine.begin() as connection:
            turn = commands.submit_turn(
                connection, conversation_id, text, idempotency_key=key, on_busy=policy
            )
        return self._ring(conversation_id, turn)

    def retry_conversation(self, conversation_id: uuid.UUID | str) -> Submitted:
        """A new turn that continues a failed one from its transcript (pending calls first)."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.begin() as connection:
            turn = commands.retry_turn(connection, conversation_id)
        return self._ring(conversation_id, turn)

    def get_turn(self, turn_id: uuid.UUID | str) -> TurnView:
        """A turn's status, error, usage and times; `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.engine.connect() as connection:
            return reads.read_turn(connection, turn_id)

    def current_turn(self, conversation_id: uuid.UUID | str) -> TurnView | None:
        """The conversation's current (or last) turn; None before the first message."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            turn = reads.current_turn(connection, conversation_id)
            if turn is None:
                commands.status_of(connection, conversation_id)  # ConversationNotFound
            return turn

    def events(
        self, conversation_id: uuid.UUID | str, after: int = 0, limit: int = 100
    ) -> EventPage:
        """Committed events with `seq > after` (at most `limit`), oldest first; `InvalidCursor`
        for a negative cursor or one beyond the last event."""
        conversation_id = parse_conversation_id(conversation_id)
        after, limit = check_cursor(after, limit)
        with self.engine.connect() as connection:
            return reads.read_events(connection, conversation_id, after, limit)

    def get_conversation(
        self, conversation_id: uuid.UUID | str, after_seq: int | None = None
    ) -> ConversationView:
        """Status, error, setup, counters and the messages with `seq > after_seq` (all if None)."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            return reads.read_conversation(connection, conversation_id, after_seq)

    def list_tools(self) -> list[ToolInfo]:
        """The tools the workers' MCP servers offer (as the workers last published them)."""
        with self.engine.connect() as connection:
            return reads.read_catalogue(connection)

    def close(self) -> None:
        if isinstance(self._enqueue, QueueRinger):
            self._enqueue.close()
        self.engine.dispose()

    @property
    def _limit(self) -> int:
        return self.settings.max_message_chars

    def _ring(self, conversation_id: uuid.UUID, turn: NewTurn) -> Submitted:
        submitted = Submitted(
            conversation_id,
            turn.message_seq,
            enqueued=False,
            turn_id=turn.id,
            turn_status=turn.status,
            repeated=turn.repeated,
        )
        if turn.waits:
            return replace(submitted, detail=WAITING)
        if turn.status != "queued":
            return submitted  # a repeated submit of a turn that has started already
        return ring(self._enqueue, submitted)


class AsyncChatClient:
    """`ChatClient` for asyncio apps: every call runs in a worker thread, never on the loop."""

    def __init__(self, client: ChatClient | None = None, **options: Any) -> None:
        self.sync = client or ChatClient(**options)

    async def create_conversation(self, **options: Any) -> uuid.UUID:
        return await asyncio.to_thread(lambda: self.sync.create_conversation(**options))

    async def submit_message(
        self, conversation_id: uuid.UUID | str, text: str, **options: Any
    ) -> Submitted:
        return await asyncio.to_thread(
            lambda: self.sync.submit_message(conversation_id, text, **options)
        )

    async def get_turn(self, turn_id: uuid.UUID | str) -> TurnView:
        return await asyncio.to_thread(self.sync.get_turn, turn_id)

    async def current_turn(self, conversation_id: uuid.UUID | str) -> TurnView | None:
        return await asyncio.to_thread(self.sync.current_turn, conversation_id)

    async def events(
        self, conversation_id: uuid.UUID | str, after: int = 0, limit: int = 100
    ) -> EventPage:
        return await asyncio.to_thread(self.sync.events, conversation_id, after, limit)

    async def retry_conversation(self, conversation_id: uuid.UUID | str) -> Submitted:
        return await asyncio.to_thread(self.sync.retry_conversation, conversation_id)

    async def get_conversation(
        self, conversation_id: uuid.UUID | str, after_seq: int | None = None
    ) -> ConversationView:
        return await asyncio.to_thread(self.sync.get_conversation, conversation_id, after_seq)

    async def list_tools(self) -> list[ToolInfo]:
        return await asyncio.to_thread(self.sync.list_tools)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)
