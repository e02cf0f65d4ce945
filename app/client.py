"""What a web app calls: create a conversation, submit a message, poll it, retry a failed turn.

`ChatClient` is synchronous (Django, Flask); `AsyncChatClient` is the same for asyncio (FastAPI,
Starlette) and runs each call in a thread. Neither imports litellm or starts an MCP server. A bad
request raises an `InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Engine, Table, func, insert, select, update

from app.config import Settings, get_settings
from app.db import make_engine
from app.errors import (
    ConversationBusy,
    ConversationNotFound,
    InvalidMessage,
    InvalidRequest,
    NotRetryable,
    UnknownTool,
)
from app.models import (
    FAILED,
    IDLE,
    PROCESSING,
    TOOL_CHOICES,
    CatalogTool,
    Conversation,
    Message,
)

log = logging.getLogger(__name__)

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)
catalog = cast(Table, CatalogTool.__table__)

Enqueue = Callable[[uuid.UUID], None]

MAX_MODEL_CHARS = 200


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    created_at: datetime


@dataclass(frozen=True)
class ConversationView:
    """A conversation's state and the messages after the caller's cursor."""

    id: uuid.UUID
    status: str
    error: str | None
    model: str
    iterations: int
    prompt_tokens: int
    completion_tokens: int
    updated_at: datetime
    messages: list[MessageView] = field(default_factory=list)

    @property
    def is_running(self) -> bool:
        return self.status not in (IDLE, FAILED)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def cursor(self, previous: int | None = None) -> int | None:
        """The `after_seq` for the next poll."""
        return self.messages[-1].seq if self.messages else previous


@dataclass(frozen=True)
class Submitted:
    """A message was stored; `enqueued` is False when the queue was unreachable (the worker's
    recovery sweep will pick the turn up when the queue is back: nothing is lost)."""

    conversation_id: uuid.UUID
    seq: int
    enqueued: bool
    detail: str | None = None


@dataclass(frozen=True)
class ToolInfo:
    name: str
    server: str
    description: str
    input_schema: dict[str, Any]


class ChatClient:
    """The synchronous web-app API over the database and the queue."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.engine = engine or make_engine(self.settings.database_url)
        self._enqueue = enqueue

    # --- conversations -----------------------------------------------------------------------

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
        model = self.settings.model if model is None else model
        if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_CHARS:
            raise InvalidRequest(f"model must be a non-empty string of at most {MAX_MODEL_CHARS}")
        if tool_choice not in TOOL_CHOICES:
            raise InvalidRequest(f"tool_choice must be one of {', '.join(TOOL_CHOICES)}")
        names = _tool_names(tools)
        if tool_choice == "required" and not names:
            raise InvalidRequest("tool_choice 'required' needs at least one tool")
        if instructions is not None:
            self._check_text(instructions, "instructions", allow_empty=True)
        _check_context(context)
        self._check_tools_exist(names)
        conversation_id = uuid.uuid4()
        with self.engine.begin() as connection:
            connection.execute(
                insert(conversations).values(
                    id=conversation_id,
                    model=model.strip(),
                    instructions=instructions,
                    allowed_tools=names,
                    tool_choice=tool_choice,
                    context=context,
                )
            )
        return conversation_id

    def submit_message(self, conversation_id: uuid.UUID | str, text: str) -> Submitted:
        """Append the user's message and start a turn; refused while a turn is running."""
        conversation_id = _as_uuid(conversation_id)
        self._check_text(text, "message")
        with self.engine.begin() as connection:
            if not _start_turn(connection, conversation_id, from_statuses=(IDLE, FAILED)):
                self._raise_not_startable(connection, conversation_id, "a new message")
            seq = connection.execute(
                select(func.coalesce(func.max(messages.c.seq), 0) + 1).where(
                    messages.c.conversation_id == conversation_id
                )
            ).scalar_one()
            connection.execute(
                insert(messages).values(
                    conversation_id=conversation_id, seq=seq, role="user", content=text
                )
            )
        return self._ring(conversation_id, seq)

    def retry_conversation(self, conversation_id: uuid.UUID | str) -> Submitted:
        """Continue a failed turn from its transcript (pending tool calls run first)."""
        conversation_id = _as_uuid(conversation_id)
        with self.engine.begin() as connection:
            if not _start_turn(connection, conversation_id, from_statuses=(FAILED,)):
                self._raise_not_retryable(connection, conversation_id)
            seq = connection.execute(
                select(func.coalesce(func.max(messages.c.seq), 0)).where(
                    messages.c.conversation_id == conversation_id
                )
            ).scalar_one()
        return self._ring(conversation_id, seq)

    def get_conversation(
        self, conversation_id: uuid.UUID | str, after_seq: int | None = None
    ) -> ConversationView:
        """Status, error, counters, and the messages with `seq > after_seq` (all when None)."""
        conversation_id = _as_uuid(conversation_id)
        with self.engine.connect() as connection:
            row = connection.execute(
                select(
                    conversations.c.id,
                    conversations.c.status,
                    conversations.c.error,
                    conversations.c.model,
                    conversations.c.iterations,
                    conversations.c.prompt_tokens,
                    conversations.c.completion_tokens,
                    conversations.c.updated_at,
                ).where(conversations.c.id == conversation_id)
            ).one_or_none()
            if row is None:
                raise ConversationNotFound(f"no conversation {conversation_id}")
            query = select(messages).where(messages.c.conversation_id == conversation_id)
            if after_seq is not None:
                query = query.where(messages.c.seq > after_seq)
            rows = connection.execute(query.order_by(messages.c.seq)).all()
        return ConversationView(
            id=row.id,
            status=row.status,
            error=row.error,
            model=row.model,
            iterations=row.iterations,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            updated_at=_aware(row.updated_at),
            messages=[_message_view(m) for m in rows],
        )

    def list_tools(self) -> list[ToolInfo]:
        """The tools the workers' MCP servers offer (as the workers last published them)."""
        with self.engine.connect() as connection:
            rows = connection.execute(select(catalog).order_by(catalog.c.name)).all()
        return [ToolInfo(r.name, r.server, r.description, r.input_schema) for r in rows]

    def close(self) -> None:
        self.engine.dispose()

    # --- helpers -------------------------------------------------------------------------------

    def _ring(self, conversation_id: uuid.UUID, seq: int) -> Submitted:
        try:
            (self._enqueue or _default_enqueue)(conversation_id)
        except Exception as exc:  # the turn is committed; the recovery sweep will enqueue it
            log.warning("conversation %s: queue unreachable (%s)", conversation_id, exc)
            detail = (
                f"queue unreachable ({type(exc).__name__}); the message is saved and a worker's "
                "recovery sweep will start the turn when the queue is back"
            )
            return Submitted(conversation_id, seq, enqueued=False, detail=detail)
        return Submitted(conversation_id, seq, enqueued=True)

    def _check_text(self, text: Any, what: str, allow_empty: bool = False) -> None:
        if not isinstance(text, str):
            raise InvalidMessage(f"{what} must be a string, not {type(text).__name__}")
        if not allow_empty and not text.strip():
            raise InvalidMessage(f"{what} is empty")
        limit = self.settings.max_message_chars
        if len(text) > limit:
            raise InvalidMessage(f"{what} is {len(text)} characters; the limit is {limit}")
        if "\x00" in text:
            raise InvalidMessage(f"{what} contains a NUL character, which cannot be stored")

    def _check_tools_exist(self, names: list[str]) -> None:
        if not names:
            return
        with self.engine.connect() as connection:
            available = set(connection.execute(select(catalog.c.name)).scalars())
        missing = [name for name in names if name not in available]
        if not missing:
            return
        if not available:
            raise UnknownTool(
                f"unknown tool(s): {', '.join(missing)}; no worker has published its tools yet "
                "(start one with `chatworker worker`, or run `chatworker tools`)"
            )
        raise UnknownTool(
            f"unknown tool(s): {', '.join(missing)}; available: {', '.join(sorted(available))}"
        )

    def _raise_not_startable(self, connection: Any, conversation_id: uuid.UUID, what: str) -> None:
        status = _status(connection, conversation_id)
        raise ConversationBusy(
            f"conversation {conversation_id} is {status}: {what} must wait until the running "
            "turn ends (idle or failed)"
        )

    def _raise_not_retryable(self, connection: Any, conversation_id: uuid.UUID) -> None:
        status = _status(connection, conversation_id)
        raise NotRetryable(
            f"conversation {conversation_id} is {status}; only a failed one can be retried"
        )


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


def _start_turn(
    connection: Any, conversation_id: uuid.UUID, from_statuses: tuple[str, ...]
) -> bool:
    """Set a resting conversation `processing` with a fresh turn budget; False if it is not."""
    now = datetime.now(UTC)
    started = connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.status.in_(from_statuses))
        .values(
            status=PROCESSING,
            error=None,
            iterations=0,
            attempts=0,
            lease_owner=None,
            lease_expires_at=None,
            heartbeat_at=now,
            updated_at=now,
        )
    )
    return bool(started.rowcount == 1)


def _default_enqueue(conversation_id: uuid.UUID) -> None:
    from app.queue import ring

    ring(conversation_id)


def _status(connection: Any, conversation_id: uuid.UUID) -> str:
    status = connection.execute(
        select(conversations.c.status).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if status is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return str(status)


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ConversationNotFound(f"no conversation {value!r} (not a valid id)") from None


def _tool_names(tools: Sequence[str]) -> list[str]:
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
        raise InvalidRequest("tools must be a list of tool names")
    return list(dict.fromkeys(tools))


def _check_context(context: Any) -> None:
    if context is None:
        return
    if not isinstance(context, dict):
        raise InvalidRequest("context must be a JSON object (a dict) or None")
    try:
        json.dumps(context)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"context must be JSON-serializable: {exc}") from None


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _message_view(row: Any) -> MessageView:
    return MessageView(
        seq=row.seq,
        role=row.role,
        content=row.content,
        tool_calls=list(row.tool_calls or []),
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        is_error=row.is_error,
        created_at=_aware(row.created_at),
    )
