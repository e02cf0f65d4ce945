"""The web app's reads: a conversation with its messages after a cursor, and the tool catalogue.

Each function runs its queries on the caller's `Connection` and returns views, never rows.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, select

from app.client.views import ConversationView, MessageView, ToolInfo
from app.errors import ConversationNotFound
from app.models import CatalogTool, Conversation, Message

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)
catalog = cast(Table, CatalogTool.__table__)

_CONVERSATION_COLUMNS = (
    conversations.c.id,
    conversations.c.status,
    conversations.c.error,
    conversations.c.model,
    conversations.c.instructions,
    conversations.c.allowed_tools,
    conversations.c.tool_choice,
    conversations.c.context,
    conversations.c.iterations,
    conversations.c.prompt_tokens,
    conversations.c.completion_tokens,
    conversations.c.updated_at,
)


def read_conversation(
    connection: Connection, conversation_id: uuid.UUID, after_seq: int | None
) -> ConversationView:
    """The conversation and its messages with `seq > after_seq` (all when None)."""
    row = connection.execute(
        select(*_CONVERSATION_COLUMNS).where(conversations.c.id == conversation_id)
    ).one_or_none()
    if row is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    query = select(messages).where(messages.c.conversation_id == conversation_id)
    if after_seq is not None:
        query = query.where(messages.c.seq > after_seq)
    rows = connection.execute(query.order_by(messages.c.seq)).all()
    return _conversation_view(row, [_message_view(m) for m in rows])


def read_catalogue(connection: Connection) -> list[ToolInfo]:
    """Every published tool, by name."""
    rows = connection.execute(select(catalog).order_by(catalog.c.name)).all()
    return [ToolInfo(r.name, r.server, r.description, r.input_schema) for r in rows]


def catalogue_names(connection: Connection) -> set[str]:
    """The names of the published tools."""
    return set(connection.execute(select(catalog.c.name)).scalars())


def _conversation_view(row: Any, message_views: list[MessageView]) -> ConversationView:
    return ConversationView(
        id=row.id,
        status=row.status,
        error=row.error,
        model=row.model,
        instructions=row.instructions,
        tools=list(row.allowed_tools or []),
        tool_choice=row.tool_choice,
        context=row.context,
        iterations=row.iterations,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        updated_at=_aware(row.updated_at),
        messages=message_views,
    )


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


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
