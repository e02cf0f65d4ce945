"""The web app's writes: create a conversation, submit a message as a turn, retry a failed turn.

Flat functions over a `Connection` in the caller's transaction; a refusal raises before the
transaction commits, so a refused command writes nothing. Every command that changes a
conversation first locks its row (`lock_conversation`), so its reads are fresh and the events it
appends take the next seqs in commit order, interleaved correctly with a worker's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, select, update

from app.errors import ConversationBusy, ConversationNotFound, IdempotencyKeyReused, NotRetryable
from app.models import (
    FAILED,
    FOR_MESSAGE,
    FOR_RETRY,
    IDLE,
    MESSAGE_COMMITTED,
    PROCESSING,
    RELEASED_LEASE,
    STATUS_CHANGED,
    TURN_QUEUED,
    Conversation,
    Event,
    Message,
    Turn,
)

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)
turns = cast(Table, Turn.__table__)
events = cast(Table, Event.__table__)

AT_REST = (IDLE, FAILED)
REJECT = "reject"
ENQUEUE = "enqueue"
BUSY_POLICIES = (REJECT, ENQUEUE)


_NO_REFERENCES = {"turn_id": None, "message_seq": None, "status": None, "attempt": None}


@dataclass(frozen=True)
class NewTurn:
    """A turn a command created (or found again, for a repeated idempotency key)."""

    id: uuid.UUID
    number: int
    status: str
    message_seq: int | None
    waits: bool = False  # queued behind the running turn, its message outside the transcript
    repeated: bool = False  # the same key and text were submitted before: nothing was written


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


def lock_conversation(connection: Connection, conversation_id: uuid.UUID) -> Any:
    """The conversation's row, locked until the transaction ends; `ConversationNotFound`."""
    row = connection.execute(
        select(
            conversations.c.status,
            conversations.c.turn_number,
            conversations.c.turn_count,
            conversations.c.event_seq,
        )
        .where(conversations.c.id == conversation_id)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return row


def submit_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    text: str,
    *,
    idempotency_key: str | None,
    on_busy: str,
) -> NewTurn:
    """A turn for the user's message: started at once when the conversation rests, else refused
    (`reject`) or queued behind the running turn (`enqueue`). A key seen before with the same text
    returns that turn and writes nothing; with another text, `IdempotencyKeyReused`."""
    row = lock_conversation(connection, conversation_id)
    if idempotency_key is not None:
        seen = _turn_with_key(connection, conversation_id, idempotency_key, text)
        if seen is not None:
            return seen
    number = row.turn_count + 1
    if row.status in AT_REST:
        message_seq = _last_message_seq(connection, conversation_id) + 1
        turn = _insert_turn(
            connection, conversation_id, number, idempotency_key, message_seq=message_seq
        )
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id, seq=message_seq, role="user", content=text
            )
        )
        _append(
            connection,
            conversation_id,
            row.event_seq,
            [
                {"type": TURN_QUEUED, "turn_id": turn.id},
                {"type": MESSAGE_COMMITTED, "turn_id": turn.id, "message_seq": message_seq},
                {"type": STATUS_CHANGED, "turn_id": turn.id, "status": PROCESSING},
            ],
            **_started(number),
        )
        return turn
    if on_busy != ENQUEUE:
        running = _turn_id(connection, conversation_id, row.turn_number)
        raise ConversationBusy(
            f"conversation {conversation_id} is {row.status}: turn {running} is running; "
            "submit with on_busy='enqueue' to queue the message behind it",
            turn_id=running,
        )
    turn = _insert_turn(connection, conversation_id, number, idempotency_key, waiting_text=text)
    queued = [{"type": TURN_QUEUED, "turn_id": turn.id}]
    _append(connection, conversation_id, row.event_seq, queued, turn_count=number)
    return turn


def retry_turn(connection: Connection, conversation_id: uuid.UUID) -> NewTurn:
    """A new turn that continues a failed one from its transcript; `NotRetryable` otherwise."""
    row = lock_conversation(connection, conversation_id)
    if row.status != FAILED:
        raise NotRetryable(
            f"conversation {conversation_id} is {row.status}; only a failed one can be retried"
        )
    number = row.turn_count + 1
    turn = _insert_turn(connection, conversation_id, number, None, kind=FOR_RETRY)
    _append(
        connection,
        conversation_id,
        row.event_seq,
        [
            {"type": TURN_QUEUED, "turn_id": turn.id},
            {"type": STATUS_CHANGED, "turn_id": turn.id, "status": PROCESSING},
        ],
        **_started(number),
    )
    return turn


def status_of(connection: Connection, conversation_id: uuid.UUID) -> str:
    """The conversation's status; `ConversationNotFound` when there is none."""
    status = connection.execute(
        select(conversations.c.status).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if status is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return str(status)


def _turn_with_key(
    connection: Connection, conversation_id: uuid.UUID, key: str, text: str
) -> NewTurn | None:
    found = connection.execute(
        select(
            turns.c.id,
            turns.c.number,
            turns.c.status,
            turns.c.message_seq,
            turns.c.input,
            messages.c.content,
        )
        .outerjoin(
            messages,
            (messages.c.conversation_id == turns.c.conversation_id)
            & (messages.c.seq == turns.c.message_seq),
        )
        .where(turns.c.conversation_id == conversation_id, turns.c.idempotency_key == key)
    ).one_or_none()
    if found is None:
        return None
    submitted = found.input if found.input is not None else found.content
    if submitted != text:
        raise IdempotencyKeyReused(
            f"idempotency key {key!r} was already used for turn {found.id} of conversation "
            f"{conversation_id} with another text; use a new key for a new message"
        )
    waits = found.input is not None
    return NewTurn(found.id, found.number, found.status, found.message_seq, waits, repeated=True)


def _insert_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    number: int,
    idempotency_key: str | None,
    *,
    kind: str = FOR_MESSAGE,
    message_seq: int | None = None,
    waiting_text: str | None = None,
) -> NewTurn:
    turn = NewTurn(uuid.uuid4(), number, "queued", message_seq, waits=waiting_text is not None)
    connection.execute(
        insert(turns).values(
            id=turn.id,
            conversation_id=conversation_id,
            number=number,
            kind=kind,
            message_seq=message_seq,
            input=waiting_text,
            idempotency_key=idempotency_key,
        )
    )
    return turn


def _started(number: int) -> dict[str, Any]:
    """The values of a resting conversation that runs turn `number` now, with a fresh budget."""
    now = datetime.now(UTC)
    return {
        "status": PROCESSING,
        "error": None,
        "iterations": 0,
        "attempts": 0,
        "turn_number": number,
        "turn_count": number,
        **RELEASED_LEASE,
        "heartbeat_at": now,
        "updated_at": now,
    }


def _append(
    connection: Connection,
    conversation_id: uuid.UUID,
    last_seq: int,
    logged: Sequence[Mapping[str, Any]],
    **values: Any,
) -> None:
    """Events after `last_seq`, and the conversation's `event_seq` (with `values`) moved past
    them in one UPDATE."""
    connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(event_seq=last_seq + len(logged), **values)
    )
    connection.execute(
        insert(events),
        [
            # Every row names every column: an executemany takes its columns from the first.
            {**_NO_REFERENCES, "conversation_id": conversation_id, "seq": last_seq + n, **event}
            for n, event in enumerate(logged, start=1)
        ],
    )


def _turn_id(connection: Connection, conversation_id: uuid.UUID, number: int) -> uuid.UUID | None:
    return connection.execute(
        select(turns.c.id).where(
            turns.c.conversation_id == conversation_id, turns.c.number == number
        )
    ).scalar_one_or_none()


def _last_message_seq(connection: Connection, conversation_id: uuid.UUID) -> int:
    query = select(messages.c.seq).where(messages.c.conversation_id == conversation_id)
    last = connection.execute(query.order_by(messages.c.seq.desc()).limit(1)).scalar_one_or_none()
    return int(last or 0)


__all__ = [
    "BUSY_POLICIES",
    "ENQUEUE",
    "REJECT",
    "NewTurn",
    "insert_conversation",
    "lock_conversation",
    "retry_turn",
    "status_of",
    "submit_turn",
]
