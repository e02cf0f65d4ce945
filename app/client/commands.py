"""The web app's writes: create a conversation, submit a message as a turn, retry a failed turn.

Flat functions over a `Connection` in the caller's transaction; a refusal raises before the
transaction commits, so a refused command writes nothing. Every command that changes a
conversation first locks its row (`lock_conversation`), so its reads are fresh and the events it
appends take the next seqs in commit order, interleaved correctly with a worker's.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from app.client.actions import answer_actions, open_clarifications, waiting_turn
from app.client.cancel import cancel_current, cancel_waiting, waiting_turns
from app.client.ledger import (
    AT_REST,
    append,
    conversations,
    last_message_seq,
    lock_conversation,
    messages,
    turn_id_of,
    turns,
)
from app.errors import (
    ConversationBusy,
    ConversationConflict,
    ConversationNotFound,
    IdempotencyKeyReused,
    NotRetryable,
)
from app.models import (
    FAILED,
    FOR_MESSAGE,
    FOR_RETRY,
    IDLE,
    MESSAGE_COMMITTED,
    PROCESSING,
    RELEASED_LEASE,
    REQUIRES_ACTION,
    RUNNING,
    STATUS_CHANGED,
    TURN_QUEUED,
)
from app.telemetry import tracing

REJECT = "reject"
ENQUEUE = "enqueue"
INTERRUPT = "interrupt"
BUSY_POLICIES = (REJECT, ENQUEUE, INTERRUPT)


@dataclass(frozen=True)
class NewTurn:
    """A turn a command created (or found again, for a repeated idempotency key)."""

    id: uuid.UUID
    number: int
    status: str
    message_seq: int | None
    waits: bool = False  # queued behind the running turn, its message outside the transcript
    repeated: bool = False  # the same key and text were submitted before: nothing was written
    announce: bool = False  # `interrupt` asked the running turn's worker to cancel it: tell it
    resumes: bool = False  # the message answered the waiting turn's question: it goes on


def insert_conversation(
    connection: Connection,
    conversation_id: uuid.UUID,
    *,
    owner: str | None,
    model: str,
    instructions: str | None,
    tools: Sequence[str],
    tool_choice: str,
    context: dict[str, Any] | None,
    client_tools: list[dict[str, Any]] | None = None,
    clarify: bool = True,
) -> bool:
    """A new idle conversation (the columns' defaults do the rest); False when one with that id
    exists already, set up exactly so for the same owner (nothing is written).

    `ConversationConflict` when the id is taken otherwise: other fields, or another owner (which
    of the two is not said, so an id reveals nothing about someone else's conversation)."""
    setup = {
        "owner": owner,
        "model": model,
        "instructions": instructions,
        "allowed_tools": list(tools),
        "tool_choice": tool_choice,
        "context": context,
        "client_tools": client_tools,
        "clarify": clarify,
    }
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
    connection.execute(delete(conversations).where(conversations.c.id == conversation_id))


def submit_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    text: str,
    *,
    idempotency_key: str | None,
    on_busy: str,
) -> NewTurn:
    """A turn for the user's message: started at once when the conversation rests, else refused
    (`reject`), queued behind the running turn (`enqueue`), or queued next while the running turn
    and any other waiting turn are cancelled (`interrupt`). A key seen before with the same text
    returns that turn and writes nothing; with another text, `IdempotencyKeyReused`."""
    row = lock_conversation(connection, conversation_id)
    if idempotency_key is not None:
        seen = _turn_with_key(connection, conversation_id, idempotency_key, text)
        if seen is not None:
            return seen
    number = row.turn_count + 1
    # (only a resting conversation's current turn can wait for the user)
    waiting = None
    if row.status == IDLE and row.turn_number:
        waiting = waiting_turn(connection, conversation_id, row.turn_number)
    asked = [] if waiting is None else open_clarifications(connection, conversation_id, waiting)
    if waiting is not None and asked:  # the message is the answer to the model's question
        answered = answer_actions(
            connection,
            conversation_id,
            waiting.id,
            dict.fromkeys(asked, text),
            now=datetime.now(UTC),
        )
        status = RUNNING if answered.resumes else REQUIRES_ACTION
        return NewTurn(waiting.id, row.turn_number, status, None, resumes=answered.resumes)
    if row.status in AT_REST and waiting is None:
        message_seq = last_message_seq(connection, conversation_id) + 1
        turn = _insert_turn(
            connection, conversation_id, number, idempotency_key, message_seq=message_seq
        )
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id, seq=message_seq, role="user", content=text
            )
        )
        append(
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
    running = turn_id_of(connection, conversation_id, row.turn_number)
    if on_busy == REJECT:
        doing = "waits for its client's tool outputs" if waiting is not None else "is running"
        raise ConversationBusy(
            f"conversation {conversation_id} is {row.status}: turn {running} {doing}; "
            "submit with on_busy='enqueue' to queue the message behind it, or 'interrupt' to "
            "cancel it and run this one",
            turn_id=running,
        )
    last_seq = row.event_seq
    now = datetime.now(UTC)
    if on_busy == INTERRUPT:
        waiting = [turn.id for turn in waiting_turns(connection, conversation_id, row.turn_number)]
        last_seq = cancel_waiting(connection, conversation_id, last_seq, waiting, now=now)
    turn = _insert_turn(connection, conversation_id, number, idempotency_key, waiting_text=text)
    queued = [{"type": TURN_QUEUED, "turn_id": turn.id}]
    append(connection, conversation_id, last_seq, queued, turn_count=number)
    if on_busy != INTERRUPT or running is None:
        return turn
    cancelled = cancel_current(
        connection,
        conversation_id,
        lock_conversation(connection, conversation_id),
        running,
        now=now,
    )
    return replace(turn, waits=not cancelled.ring, announce=cancelled.announce)


def retry_turn(connection: Connection, conversation_id: uuid.UUID) -> NewTurn:
    """A new turn that continues a failed one from its transcript; `NotRetryable` otherwise."""
    row = lock_conversation(connection, conversation_id)
    if row.status != FAILED:
        raise NotRetryable(
            f"conversation {conversation_id} is {row.status}; only a failed one can be retried"
        )
    number = row.turn_count + 1
    turn = _insert_turn(connection, conversation_id, number, None, kind=FOR_RETRY)
    append(
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
            # The submit's span, when traced: every claim of the turn continues its trace.
            **({"trace_context": traced} if (traced := tracing.carrier()) else {}),
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


__all__ = [
    "BUSY_POLICIES",
    "ENQUEUE",
    "INTERRUPT",
    "REJECT",
    "NewTurn",
    "insert_conversation",
    "retry_turn",
    "status_of",
    "submit_turn",
]
