"""What a web app calls: create a conversation, submit a message, poll it, retry a failed turn.

`ChatClient` is synchronous (Django, Flask); `AsyncChatClient` is the same for asyncio (FastAPI,
Starlette) and runs each call in a thread. Each call checks its input (`checks`), runs its SQL
(`commands`, `reads`) in one transaction, and rings the queue (`doorbell`). A bad request raises an
`InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from app.client import commands, reads
from app.client.checks import (
    check_context,
    check_model,
    check_text,
    check_tool_choice,
    check_tool_names,
    check_tools_offered,
    parse_conversation_id,
)
from app.client.doorbell import Enqueue, QueueRinger, default_enqueue, ring
from app.client.views import ConversationView, Submitted, ToolInfo
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

    def submit_message(self, conversation_id: uuid.UUID | str, text: str) -> Submitted:
        """Append the user's message and start a turn; refused while a turn is running."""
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit)
        with self.engine.begin() as connection:
            commands.start_turn_for_message(connection, conversation_id)
            seq = commands.append_user_message(connection, conversation_id, text)
        return self._ring(conversation_id, seq)

    def retry_conversation(self, conversation_id: uuid.UUID | str) -> Submitted:
        """Continue a failed turn from its transcript (pending tool calls run first)."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.begin() as connection:
            commands.restart_failed_turn(connection, conversation_id)
            seq = commands.last_seq(connection, conversation_id)
        return self._ring(conversation_id, seq)

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

    def _ring(self, conversation_id: uuid.UUID, seq: int) -> Submitted:
        return ring(self._enqueue, conversation_id, seq)


class AsyncChatClient:
    """`ChatClient` for asyncio apps: every call runs in a worker thread, never on the loop."""

    def __init__(self, client: ChatClient | None = None, **options: Any) -> None:
        self.sync = client or ChatClient(**options)

    async def create_conversation(self, **options: Any) -> uuid.UUID:
        return await asyncio.to_thread(lambda: self.sync.create_conversation(**options))

    async def submit_message(self, conversation_id: uuid.UUID | str, text: str) -> Submitted:
        return await asyncio.to_thread(self.sync.submit_message, conversation_id, text)

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
