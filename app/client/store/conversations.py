"""The web side's writes of a conversation as a whole: created (or found again, set up the same),
forked, deleted; and its status, read. Its turns are `new_turns`'.

Flat functions over a `Connection` in the caller's transaction (`intake` decides which to run).
Every write that changes a conversation comes after its row is locked (`lock_conversation`), so
the events it appends take the next seqs in commit order, interleaved correctly with a worker's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Integer, Uuid, delete, insert, literal, select

from app.client.setup import SETUP_COLUMNS
from app.client.store.journal import (
    AT_REST,
    append,
    lock_conversation,
    turn_id_of,
)
from app.errors import ConversationBusy, ConversationConflict, ConversationNotFound
from app.files import store as files
from app.models import MESSAGE_COMMITTED
from app.models.tables import conversations, messages


def insert_conversation(
    connection: Connection,
    conversation_id: uuid.UUID,
    owner: str | None,
    columns: Mapping[str, Any],
) -> bool:
    """A new idle conversation of `owner` set up by `columns` (`setup.check_setup`'s; the
    columns' defaults do the rest); False when one with that id exists already, set up exactly
    so for the same owner (nothing is written).

    `ConversationConflict` when the id is taken otherwise: other fields, or another owner (which
    of the two is not said, so an id reveals nothing about someone else's conversation)."""
    setup = {"owner": owner, **columns}
    existing = connection.execute(
        select(*(conversations.c[name] for name in setup)).where(
            conversations.c.id == conversation_id
        )
    ).one_or_none()
    if existing is not None:
        if dict(existing._mapping) != setup:
            raise ConversationConflict(
                f"conversation id {conversation_id} is taken by a conversation set up "
                "differently; choose another id, or send the same fields to get it back"
            )
        return False
    connection.execute(insert(conversations).values(id=conversation_id, **setup))
    return True


def insert_fork(
    connection: Connection, source: uuid.UUID, fork: uuid.UUID, at_seq: int | None
) -> None:
    """A new idle conversation `fork`, set up as `source` (its owner too), remembering where it
    came from; `ConversationConflict` when the id is taken."""
    taken = connection.execute(
        select(conversations.c.id).where(conversations.c.id == fork)
    ).one_or_none()
    if taken is not None:
        raise ConversationConflict(f"conversation id {fork} is taken; choose another id")
    setup = [conversations.c[name] for name in _SETUP]
    connection.execute(
        insert(conversations).from_select(
            ["id", *_SETUP, "forked_from", "forked_at_seq"],
            select(
                literal(fork, Uuid),
                *setup,
                conversations.c.id,
                literal(at_seq, Integer),
            ).where(conversations.c.id == source),
        )
    )


# What a conversation is set up with (a fork copies it).
_SETUP = ("owner", *SETUP_COLUMNS)


def insert_history(
    connection: Connection, conversation_id: uuid.UUID, history: list[dict[str, Any]]
) -> bool:
    """`history` (messages: role, content, tool_calls, tool_call_id, tool_name) as the whole of
    a new conversation's single path, numbered 1..n, each committed (no turn made them); False
    when the conversation holds messages already (nothing is written)."""
    row = lock_conversation(connection, conversation_id)
    if row.event_seq or row.turn_count:
        return False
    connection.execute(
        insert(messages),
        [
            {
                "conversation_id": conversation_id,
                "seq": seq,
                "parent_seq": seq - 1 or None,
                "active": True,
                "role": message["role"],
                "content": message.get("content"),
                "tool_calls": message.get("tool_calls"),
                "tool_call_id": message.get("tool_call_id"),
                "tool_name": message.get("tool_name"),
            }
            for seq, message in enumerate(history, start=1)
        ],
    )
    committed = [
        {"type": MESSAGE_COMMITTED, "message_seq": seq} for seq in range(1, len(history) + 1)
    ]
    append(connection, conversation_id, row.event_seq, committed)
    return True


def delete_conversation(connection: Connection, conversation_id: uuid.UUID) -> None:
    """The conversation with its turns, messages and events (the foreign keys cascade), once it
    rests: `ConversationBusy` while a turn runs or waits (cancel it first)."""
    row = lock_conversation(connection, conversation_id)
    if row.status not in AT_REST or row.turn_count > row.turn_number:
        running = turn_id_of(connection, conversation_id, row.turn_number)
        raise ConversationBusy(
            f"conversation {conversation_id} is {row.status}: turn {running} is running or "
            "waiting; cancel it, then delete the conversation",
            turn_id=running,
        )
    candidates = files.used_by(connection, [conversation_id])
    connection.execute(delete(conversations).where(conversations.c.id == conversation_id))
    files.forget(connection, candidates)  # (those no other conversation uses)


def status_of(connection: Connection, conversation_id: uuid.UUID) -> str:
    """The conversation's status; `ConversationNotFound` when there is none."""
    status = connection.execute(
        select(conversations.c.status).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if status is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return str(status)


__all__ = [
    "delete_conversation",
    "insert_conversation",
    "insert_fork",
    "insert_history",
    "status_of",
]
