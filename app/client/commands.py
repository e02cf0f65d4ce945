"""The web app's writes: create a conversation, start a turn, append the user's message.

Flat functions over a `Connection` in the caller's transaction; a refusal raises before the
transaction commits, so a refused command writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, select, update

from app.errors import ConversationBusy, ConversationNotFound, NotRetryable
from app.models import FAILED, IDLE, PROCESSING, RELEASED_LEASE, Conversation, Message

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)


def insert_conversation(
    connection: Connection,
    conversation_id: uuid.UUID,
    *,
    model: str,
    instructions: str | None,
    tools: Sequence[str],
    tool_choice: str,
    context: dict[str, Any] | None,
) -> None:
    """A new idle conversation (the columns' defaults do the rest)."""
    connection.execute(
        insert(conversations).values(
            id=conversation_id,
            model=model,
            instructions=instructions,
            allowed_tools=list(tools),
            tool_choice=tool_choice,
            context=context,
        )
    )


def start_turn_for_message(connection: Connection, conversation_id: uuid.UUID) -> None:
    """Start a turn for a new message; `ConversationBusy` while one is running."""
    if not _start_turn(connection, conversation_id, from_statuses=(IDLE, FAILED)):
        status = status_of(connection, conversation_id)
        raise ConversationBusy(
            f"conversation {conversation_id} is {status}: a new message must wait until the "
            "running turn ends (idle or failed)"
        )


def restart_failed_turn(connection: Connection, conversation_id: uuid.UUID) -> None:
    """Start again the turn of a failed conversation; `NotRetryable` in any other status."""
    if not _start_turn(connection, conversation_id, from_statuses=(FAILED,)):
        status = status_of(connection, conversation_id)
        raise NotRetryable(
            f"conversation {conversation_id} is {status}; only a failed one can be retried"
        )


def append_user_message(connection: Connection, conversation_id: uuid.UUID, text: str) -> int:
    """Store the user's message after the last one; its `seq`."""
    seq = last_seq(connection, conversation_id) + 1
    connection.execute(
        insert(messages).values(conversation_id=conversation_id, seq=seq, role="user", content=text)
    )
    return seq


def last_seq(connection: Connection, conversation_id: uuid.UUID) -> int:
    """The `seq` of the conversation's last message (0 when it has none)."""
    query = select(func.coalesce(func.max(messages.c.seq), 0))
    seq = connection.execute(query.where(messages.c.conversation_id == conversation_id))
    return int(seq.scalar_one())


def status_of(connection: Connection, conversation_id: uuid.UUID) -> str:
    """The conversation's status; `ConversationNotFound` when there is none."""
    status = connection.execute(
        select(conversations.c.status).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if status is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return str(status)


def _start_turn(
    connection: Connection, conversation_id: uuid.UUID, from_statuses: tuple[str, ...]
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
            **RELEASED_LEASE,
            heartbeat_at=now,
            updated_at=now,
        )
    )
    return started.rowcount == 1
