"""The web side's new turns: a turn started, queued behind the running one, or started again
after a failure, with their events and where their messages hang; and the read a submit is
admitted on (the turn of an idempotency key).

Flat functions over a `Connection` in the caller's transaction (`intake` decides which to run),
each after the conversation's row is locked (`lock_conversation`), so the events it appends take
the next seqs in commit order, interleaved correctly with a worker's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from app.client.admission import Keyed
from app.client.store import branches
from app.client.store.journal import (
    append,
    last_message_seq,
    leaf_seq,
)
from app.models import (
    BRANCH_SWITCHED,
    FOR_MESSAGE,
    FOR_REGENERATE,
    FOR_RETRY,
    MESSAGE_COMMITTED,
    PROCESSING,
    RELEASED_LEASE,
    STATUS_CHANGED,
    TURN_QUEUED,
)
from app.models.tables import messages, turns
from app.telemetry import tracing


@dataclass(frozen=True)
class Target:
    """Where a new turn's messages hang, when not below the leaf: an edit (a new user message
    below `parent`, ROOT for a new first message) or a regenerate (a new answer to the user
    message `parent`, which is the turn's own message)."""

    kind: str  # FOR_MESSAGE (an edit, a rollback, a reply after) or FOR_REGENERATE
    parent: int

    @property
    def regenerates(self) -> bool:
        return self.kind == FOR_REGENERATE


#: A turn's `parent_seq` for messages that start a new path (`messages.parent_seq` NULL).
ROOT = 0


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


def start_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    row: Any,
    text: str,
    key: str | None,
    *,
    metadata: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
    echo: dict[str, Any] | None = None,
    target: Target | None = None,
) -> NewTurn:
    """The user's message as a turn that runs now (`row`: the locked, resting conversation),
    below the leaf, or where `target` says: the active path ends there first, on whichever
    branch that is (an edit, a regenerate, which writes no message: it answers its user message
    again)."""
    number = row.turn_count + 1
    parent = leaf_seq(connection, conversation_id) if target is None else target.parent or None
    switched = target is not None and branches.cut_after(connection, conversation_id, parent)
    logged: list[dict[str, Any]] = []
    if switched:
        logged.append({"type": BRANCH_SWITCHED, "message_seq": parent})
    if target is not None and target.regenerates:
        turn = _insert_turn(
            connection,
            conversation_id,
            number,
            key,
            kind=FOR_REGENERATE,
            message_seq=target.parent,
            parent_seq=target.parent,
            metadata=metadata,
            output_schema=output_schema,
            files=files,
            echo=echo,
        )
    else:
        message_seq = last_message_seq(connection, conversation_id) + 1
        turn = _insert_turn(
            connection,
            conversation_id,
            number,
            key,
            message_seq=message_seq,
            parent_seq=parent or ROOT,
            metadata=metadata,
            output_schema=output_schema,
            files=files,
            echo=echo,
        )
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id,
                seq=message_seq,
                parent_seq=parent,
                role="user",
                content=text,
                files=files or None,
            )
        )
        logged.append({"type": MESSAGE_COMMITTED, "message_seq": message_seq})
    append(
        connection,
        conversation_id,
        row.event_seq,
        [
            {"type": TURN_QUEUED, "turn_id": turn.id},
            *({**event, "turn_id": turn.id} for event in logged),
            {"type": STATUS_CHANGED, "turn_id": turn.id, "status": PROCESSING},
        ],
        **_started(number),
    )
    return turn


def queue_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    row: Any,
    last_seq: int,
    *,
    text: str,
    key: str | None,
    metadata: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
    echo: dict[str, Any] | None = None,
    kind: str = FOR_MESSAGE,
    target: Target | None = None,
) -> NewTurn:
    """The user's message as a turn waiting behind the current one, its text outside the
    transcript until its time comes; `last_seq`: the log's last seq now. With `target` the
    claim that starts it cuts the active path there first (an edit, a regenerate, a rollback);
    a `steer` turn is taken in by the running turn at its next model call."""
    number = row.turn_count + 1
    parent = None if target is None else target.parent
    regenerate = target is not None and target.regenerates
    turn = _insert_turn(
        connection,
        conversation_id,
        number,
        key,
        kind=FOR_REGENERATE if regenerate else kind,
        waiting_text=None if regenerate else text,
        message_seq=parent if regenerate else None,  # (it answers that message again)
        parent_seq=parent,
        metadata=metadata,
        output_schema=output_schema,
        files=files,
        echo=echo,
    )
    queued = [{"type": TURN_QUEUED, "turn_id": turn.id}]
    append(connection, conversation_id, last_seq, queued, turn_count=number)
    return replace(turn, waits=True)


def retry_turn(connection: Connection, conversation_id: uuid.UUID, row: Any) -> NewTurn:
    """A new turn that continues the failed conversation (`row`, locked) from its transcript."""
    number = row.turn_count + 1
    leaf = leaf_seq(connection, conversation_id)
    turn = _insert_turn(
        connection, conversation_id, number, None, kind=FOR_RETRY, parent_seq=leaf or ROOT
    )
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


def where_turn_hangs(connection: Connection, conversation_id: uuid.UUID, row: Any) -> int:
    """Where the current turn's messages hang (a rollback's new message goes there instead):
    its `parent_seq`, or, for a turn that has not started yet, the leaf (ROOT: none)."""
    hangs = connection.execute(
        select(turns.c.parent_seq).where(
            turns.c.conversation_id == conversation_id, turns.c.number == row.turn_number
        )
    ).scalar_one_or_none()
    if hangs is not None:
        return int(hangs)
    return leaf_seq(connection, conversation_id) or ROOT


def keyed_turn(connection: Connection, conversation_id: uuid.UUID, key: str) -> Keyed | None:
    """The turn the idempotency key was used for, with the text it was submitted with."""
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
    waits = found.input is not None
    return Keyed(found.id, found.number, found.status, found.message_seq, submitted, waits)


def _insert_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    number: int,
    idempotency_key: str | None,
    *,
    kind: str = FOR_MESSAGE,
    message_seq: int | None = None,
    waiting_text: str | None = None,
    parent_seq: int | None = None,
    metadata: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
    echo: dict[str, Any] | None = None,
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
            parent_seq=parent_seq,
            idempotency_key=idempotency_key,
            caller_metadata=metadata or None,
            output_schema=output_schema,
            echo=echo,
            # (a waiting message's files wait with its text)
            files=files if waiting_text is not None else None,
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
    "ROOT",
    "NewTurn",
    "Target",
    "keyed_turn",
    "queue_turn",
    "retry_turn",
    "start_turn",
    "where_turn_hangs",
]
