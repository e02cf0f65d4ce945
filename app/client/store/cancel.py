"""Cancelling a turn from the web side, under the conversation's row lock.

    the turn                                   what the command writes
    -----------------------------------------  ----------------------------------------------------
    finished (completed, failed, cancelled)    nothing: it stays as it ended
    waiting behind the running turn            the request (`cancel_requested_at`,
                                               `turn.cancel_requested`); the worker that reaches
                                               it ends it `cancelled` at its claim, before any
                                               model call (its message enters the transcript,
                                               unanswered)
    current, a worker holds a live lease       the request; the caller tells that worker at
                                               once, and it ends the turn itself
    current, no live lease (never claimed,     the turn ended here: the lease epoch moves on (a
    its worker died and the lease expired, or  worker that wakes up writes nothing), a "cancelled"
    it waits for the user: `requires_action`)  result for every call left open, the turn
                                               `cancelled`, the conversation `idle`, or on to the
                                               next waiting turn (the caller rings a worker)

Asking twice is harmless: a request already made writes nothing more, a finished turn stays.

Why a waiting turn is not ended here at once: the worker hands a conversation over to its next
turn in the statement that ends the current one, from the row's own counters; that statement may
be waiting for the row lock behind this very command, and would then still see the waiting turn
as it was. A request is safe whenever it is read.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select, update

from app.client.store.journal import (
    AT_REST,
    append,
    holder_is_live,
    insert_results,
    lock_conversation,
    turn_id_of,
)
from app.errors import TurnNotFound
from app.models import (
    ASSISTANT,
    CANCEL_REQUESTED,
    CANCELLED,
    CANCELLED_CALL_RESULT,
    FINISHED_TURN_STATUSES,
    IDLE,
    PROCESSING,
    QUEUED,
    RELEASED_LEASE,
    REQUIRES_ACTION,
    STATUS_CHANGED,
    TOOL,
    TURN_CANCELLED,
    USER,
)
from app.models.tables import conversations, messages, turns


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel did, and what the caller must do once it committed."""

    turn_id: uuid.UUID | None  # the turn it acted on; None when the conversation has none
    announce: bool = False  # a worker holds the turn: tell it now (the request is committed)
    ring: bool = False  # the turn ended here and the next waiting one starts: ring a worker


def cancel_turn(
    connection: Connection,
    conversation_id: uuid.UUID,
    turn_id: uuid.UUID | None,
    *,
    now: datetime,
) -> CancelOutcome:
    """Cancel `turn_id`, or the conversation's current turn (see the module's table)."""
    row = lock_conversation(connection, conversation_id)
    target = _turn(
        connection,
        conversation_id,
        turn_id or turn_id_of(connection, conversation_id, row.turn_number),
    )
    if target is None:
        if turn_id is not None:
            raise TurnNotFound(f"no turn {turn_id} in conversation {conversation_id}")
        return CancelOutcome(None)
    if target.status in FINISHED_TURN_STATUSES:
        return CancelOutcome(target.id)
    if target.number > row.turn_number:
        _request(connection, conversation_id, row.event_seq, target.id, now=now)
        return CancelOutcome(target.id)
    return cancel_current(connection, conversation_id, row, target.id, now=now)


def cancel_current(
    connection: Connection,
    conversation_id: uuid.UUID,
    row: Any,
    turn_id: uuid.UUID,
    *,
    now: datetime,
) -> CancelOutcome:
    """The running (or queued, unclaimed) current turn: a request to its live worker, or ended
    here when no worker holds it. `row` is the locked conversation."""
    if row.status in AT_REST:  # a resting conversation runs no turn (an invariant)...
        waits = connection.execute(select(turns.c.status).where(turns.c.id == turn_id)).scalar()
        if waits != REQUIRES_ACTION:
            return CancelOutcome(turn_id)
        # ...but its current turn may wait for the user: no worker holds it, end it here.
        return CancelOutcome(
            turn_id, ring=_end_here(connection, conversation_id, row, turn_id, now)
        )
    if holder_is_live(row, now):
        _request(connection, conversation_id, row.event_seq, turn_id, now=now)
        return CancelOutcome(turn_id, announce=True)
    return CancelOutcome(turn_id, ring=_end_here(connection, conversation_id, row, turn_id, now))


def _request(
    connection: Connection,
    conversation_id: uuid.UUID,
    last_seq: int,
    turn_id: uuid.UUID,
    *,
    now: datetime,
) -> int:
    """The cancel request of a turn (once: a second one writes nothing); the new last seq."""
    requested = connection.execute(
        update(turns)
        .where(turns.c.id == turn_id, turns.c.cancel_requested_at.is_(None))
        .values(cancel_requested_at=now)
    ).rowcount
    if not requested:
        return last_seq
    logged = [{"type": CANCEL_REQUESTED, "turn_id": turn_id}]
    return append(connection, conversation_id, last_seq, logged)


def cancel_waiting(
    connection: Connection,
    conversation_id: uuid.UUID,
    last_seq: int,
    turn_ids: Sequence[uuid.UUID],
    *,
    now: datetime,
) -> int:
    """Cancel requests for turns waiting behind the running one; the new last seq."""
    for turn_id in turn_ids:
        last_seq = _request(connection, conversation_id, last_seq, turn_id, now=now)
    return last_seq


def waiting_turns(connection: Connection, conversation_id: uuid.UUID, after: int) -> list[Any]:
    """The turns (id, number) queued behind turn number `after`, in order."""
    return list(
        connection.execute(
            select(turns.c.id, turns.c.number)
            .where(
                turns.c.conversation_id == conversation_id,
                turns.c.number > after,
                turns.c.status == QUEUED,
            )
            .order_by(turns.c.number)
        ).all()
    )


def _end_here(
    connection: Connection, conversation_id: uuid.UUID, row: Any, turn_id: uuid.UUID, now: datetime
) -> bool:
    """End the current turn `cancelled` with no worker; True when the next waiting turn starts."""
    open_calls = _unanswered_calls(connection, conversation_id)
    logged = insert_results(
        connection,
        conversation_id,
        turn_id,
        [(call["id"], call["name"], CANCELLED_CALL_RESULT, True) for call in open_calls],
    )
    connection.execute(
        update(turns)
        .where(turns.c.id == turn_id)
        .values(
            status=CANCELLED,
            finished_at=now,
            cancel_requested_at=func.coalesce(turns.c.cancel_requested_at, now),
        )
    )
    logged.append({"type": TURN_CANCELLED, "turn_id": turn_id})
    hands_over = bool(row.turn_count > row.turn_number)  # as the worker decides it
    ending: dict[str, Any] = {
        "lease_epoch": conversations.c.lease_epoch + 1,  # a worker that wakes up writes nothing
        "attempts": 0,
        **RELEASED_LEASE,
        "heartbeat_at": now,
        "updated_at": now,
    }
    if hands_over:
        ending.update(turn_number=row.turn_number + 1, iterations=0, error=None)
        if row.status in AT_REST:  # a turn that waited for the user: the next one runs now
            ending.update(status=PROCESSING)
            logged.append({"type": STATUS_CHANGED, "turn_id": turn_id, "status": PROCESSING})
    else:
        ending.update(status=IDLE)
        logged.append({"type": STATUS_CHANGED, "turn_id": turn_id, "status": IDLE})
    append(connection, conversation_id, row.event_seq, logged, **ending)
    return hands_over


def _unanswered_calls(connection: Connection, conversation_id: uuid.UUID) -> list[dict[str, Any]]:
    """The calls of the current turn's last assistant message that have no result, in order:
    on the active path (another branch's open calls are that version's)."""
    on_path = (messages.c.conversation_id == conversation_id) & messages.c.active
    last_user = (
        select(messages.c.seq)
        .where(on_path, messages.c.role == USER)
        .order_by(messages.c.seq.desc())
        .limit(1)
        .scalar_subquery()
    )
    rows = connection.execute(
        select(messages.c.role, messages.c.tool_calls, messages.c.tool_call_id)
        .where(on_path, messages.c.seq >= last_user)
        .order_by(messages.c.seq)
    ).all()
    calls: list[dict[str, Any]] = []
    answered: set[str] = set()
    for role, tool_calls, tool_call_id in rows:
        if role == ASSISTANT:
            calls = _as_list(tool_calls)
            answered = set()
        elif role == TOOL:
            answered.add(tool_call_id)
    return [call for call in calls if call.get("id") not in answered]


def _as_list(tool_calls: Any) -> list[dict[str, Any]]:
    if isinstance(tool_calls, str):  # a driver that hands JSON back as text
        tool_calls = json.loads(tool_calls)
    return list(tool_calls or [])


def _turn(connection: Connection, conversation_id: uuid.UUID, turn_id: uuid.UUID | None) -> Any:
    if turn_id is None:
        return None
    return connection.execute(
        select(turns.c.id, turns.c.number, turns.c.status).where(
            turns.c.id == turn_id, turns.c.conversation_id == conversation_id
        )
    ).one_or_none()


__all__ = ["CancelOutcome", "cancel_current", "cancel_turn", "cancel_waiting", "waiting_turns"]
