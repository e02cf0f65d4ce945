"""The web side's journal: what every web-side write does first and last: lock the conversation's
row, and append its events with the conversation's counters moved past them in one UPDATE.

Locking the row orders a web-side write against the worker's fenced statements, so the events it
appends take the next seqs in commit order and its reads of the conversation are fresh.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from app.errors import ConversationNotFound
from app.models import FAILED, IDLE, MESSAGE_COMMITTED, TOOL
from app.models.tables import conversations, events, messages, turns

AT_REST = (IDLE, FAILED)

_NO_REFERENCES = {"turn_id": None, "message_seq": None, "status": None, "attempt": None}


def lock_conversation(connection: Connection, conversation_id: uuid.UUID) -> Any:
    """The conversation's row, locked until the transaction ends; `ConversationNotFound`.

    Call it first in the transaction. SQLite has no row locks (`FOR UPDATE` is dropped): a write
    first takes the database's write lock instead, so the read that follows cannot be overtaken
    by a worker's commit (a transaction that read first could not write after one)."""
    if connection.dialect.name == "sqlite":
        connection.execute(
            update(conversations)
            .where(conversations.c.id == conversation_id)
            .values(event_seq=conversations.c.event_seq)
        )
    row = connection.execute(
        select(
            conversations.c.status,
            conversations.c.turn_number,
            conversations.c.turn_count,
            conversations.c.event_seq,
            conversations.c.lease_owner,
            conversations.c.lease_expires_at,
        )
        .where(conversations.c.id == conversation_id)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return row


def holder_is_live(row: Any, now: datetime) -> bool:
    """A worker holds the conversation's lease and it has not expired (by `now`)."""
    expires = row.lease_expires_at
    if row.lease_owner is None or expires is None:
        return False
    if expires.tzinfo is None:  # SQLite hands back naive datetimes; they are UTC
        expires = expires.replace(tzinfo=now.tzinfo)
    return bool(expires > now)


def append(
    connection: Connection,
    conversation_id: uuid.UUID,
    last_seq: int,
    logged: Sequence[Mapping[str, Any]],
    **values: Any,
) -> int:
    """Events after `last_seq`, and the conversation's `event_seq` (with `values`) moved past
    them in one UPDATE; the new last seq."""
    new_last = last_seq + len(logged)
    connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(event_seq=new_last, **values)
    )
    if logged:
        connection.execute(
            insert(events),
            [
                # Every row names every column: an executemany takes its columns from the first.
                {**_NO_REFERENCES, "conversation_id": conversation_id, "seq": last_seq + n, **e}
                for n, e in enumerate(logged, start=1)
            ],
        )
    return new_last


def insert_results(
    connection: Connection,
    conversation_id: uuid.UUID,
    turn_id: uuid.UUID,
    results: Sequence[tuple[str, str, str, bool]],
) -> list[dict[str, Any]]:
    """Tool results (call id, tool name, content, is_error) committed by the web side after the
    last message, in order (only while no worker holds the turn); their `message.committed`
    events, for `append`."""
    seq = last_message_seq(connection, conversation_id)
    parent = leaf_seq(connection, conversation_id)
    logged: list[dict[str, Any]] = []
    for call_id, name, content, is_error in results:
        seq += 1
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id,
                seq=seq,
                parent_seq=parent,
                role=TOOL,
                content=content,
                tool_call_id=call_id,
                tool_name=name,
                is_error=is_error,
            )
        )
        logged.append({"type": MESSAGE_COMMITTED, "turn_id": turn_id, "message_seq": seq})
        parent = seq
    return logged


def turn_id_of(connection: Connection, conversation_id: uuid.UUID, number: int) -> uuid.UUID | None:
    return connection.execute(
        select(turns.c.id).where(
            turns.c.conversation_id == conversation_id, turns.c.number == number
        )
    ).scalar_one_or_none()


def last_message_seq(connection: Connection, conversation_id: uuid.UUID) -> int:
    """The conversation's last seq, of any branch: the next message takes the one after."""
    query = select(messages.c.seq).where(messages.c.conversation_id == conversation_id)
    last = connection.execute(query.order_by(messages.c.seq.desc()).limit(1)).scalar_one_or_none()
    return int(last or 0)


def leaf_seq(connection: Connection, conversation_id: uuid.UUID) -> int | None:
    """The active path's last message (None: no message yet): the next one's parent."""
    query = select(messages.c.seq).where(
        messages.c.conversation_id == conversation_id, messages.c.active
    )
    last = connection.execute(query.order_by(messages.c.seq.desc()).limit(1)).scalar_one_or_none()
    return None if last is None else int(last)


__all__ = [
    "AT_REST",
    "append",
    "holder_is_live",
    "insert_results",
    "last_message_seq",
    "leaf_seq",
    "lock_conversation",
    "turn_id_of",
]
