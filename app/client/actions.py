"""The user's answers to a turn that waits for them (`requires_action`), under the conversation's
row lock: each answer becomes the waiting call's result, and the last one hands the turn back to
the workers.

    the answer (call id, output)                 what the command writes
    -------------------------------------------  ---------------------------------------------------
    a call the turn never waited on              nothing: `ActionNotFound`
    a call answered already, with this output    nothing (a retried request)
    a call answered already, with another one    nothing: `ActionAlreadyAnswered` (a cancel's
      (or cancelled meanwhile)                     "cancelled" result counts as an answer)
    a waiting call                               its result (a tool message, `message.committed`)
    ...the last waiting call of the turn         also: the turn `running`, the conversation
                                                   `processing` (`status.changed`): the caller
                                                   rings a worker, whose claim resumes the turn

One request is all or nothing: a refused answer refuses the whole request. A clarification
(`agent_clarify`) is answered the same way, or by the next message the user submits
(`commands.submit_turn`): its text becomes the call's result, not a new user message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from app.client.ledger import (
    append,
    last_message_seq,
    lock_conversation,
    messages,
    turns,
)
from app.errors import ActionAlreadyAnswered, ActionNotFound, TurnNotFound
from app.models import (
    CLARIFICATION,
    MESSAGE_COMMITTED,
    PROCESSING,
    REQUIRES_ACTION,
    RUNNING,
    STATUS_CHANGED,
    TOOL,
)


@dataclass(frozen=True)
class Answered:
    """What an answer did: the turn it answered, and whether the turn goes on (ring a worker)."""

    turn_id: uuid.UUID
    resumes: bool = False
    written: int = 0  # results committed by this request (0: all were answered before)


def answer_actions(
    connection: Connection,
    conversation_id: uuid.UUID,
    turn_id: uuid.UUID,
    outputs: Mapping[str, str],
    *,
    now: datetime,
) -> Answered:
    """Commit `outputs` (call id -> output) as the waiting calls' results (the module's table)."""
    row = lock_conversation(connection, conversation_id)
    turn = connection.execute(
        select(turns.c.number, turns.c.status, turns.c.actions).where(
            turns.c.id == turn_id, turns.c.conversation_id == conversation_id
        )
    ).one_or_none()
    if turn is None:
        raise TurnNotFound(f"no turn {turn_id} in conversation {conversation_id}")
    waited = {action["call_id"]: action for action in turn.actions or ()}
    results = _results(connection, conversation_id, list(waited))
    new: list[tuple[dict[str, Any], str]] = []
    for call_id, output in outputs.items():
        action = waited.get(call_id)
        if action is None:
            raise ActionNotFound(
                f"turn {turn_id} waits for no call {call_id!r}"
                + (f"; it waits for {', '.join(sorted(waited))}" if waited else "")
            )
        if call_id in results:
            if results[call_id] == output:
                continue
            raise ActionAlreadyAnswered(
                f"call {call_id!r} of turn {turn_id} has its answer already; a call is answered "
                "once"
            )
        if turn.status != REQUIRES_ACTION:  # (its calls are all answered when it moves on)
            raise ActionAlreadyAnswered(f"turn {turn_id} is {turn.status}, not waiting")
        new.append((action, output))
    if not new:
        return Answered(turn_id)
    seq = last_message_seq(connection, conversation_id)
    logged: list[dict[str, Any]] = []
    for action, output in new:
        seq += 1
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id,
                seq=seq,
                role=TOOL,
                content=output,
                tool_call_id=action["call_id"],
                tool_name=action["name"],
                is_error=False,
            )
        )
        logged.append({"type": MESSAGE_COMMITTED, "turn_id": turn_id, "message_seq": seq})
    resumes = len(results) + len(new) == len(waited)
    values: dict[str, Any] = {"updated_at": now}
    if resumes:
        connection.execute(update(turns).where(turns.c.id == turn_id).values(status=RUNNING))
        logged.append({"type": STATUS_CHANGED, "turn_id": turn_id, "status": PROCESSING})
        values.update(status=PROCESSING, heartbeat_at=now, attempts=0)
    append(connection, conversation_id, row.event_seq, logged, **values)
    return Answered(turn_id, resumes=resumes, written=len(new))


def waiting_clarifications(
    connection: Connection, conversation_id: uuid.UUID, turn_number: int
) -> tuple[uuid.UUID, list[str]] | None:
    """The current turn and its unanswered clarification calls, if it waits for any."""
    turn = connection.execute(
        select(turns.c.id, turns.c.status, turns.c.actions).where(
            turns.c.conversation_id == conversation_id, turns.c.number == turn_number
        )
    ).one_or_none()
    if turn is None or turn.status != REQUIRES_ACTION:
        return None
    asked = [a["call_id"] for a in turn.actions or () if a["kind"] == CLARIFICATION]
    answered = _results(connection, conversation_id, asked)
    open_calls = [call_id for call_id in asked if call_id not in answered]
    return (turn.id, open_calls) if open_calls else None


def waiting_turn(connection: Connection, conversation_id: uuid.UUID, turn_number: int) -> Any:
    """The current turn (id, status) when it waits for the user, else None."""
    turn = connection.execute(
        select(turns.c.id, turns.c.status).where(
            turns.c.conversation_id == conversation_id, turns.c.number == turn_number
        )
    ).one_or_none()
    return turn if turn is not None and turn.status == REQUIRES_ACTION else None


def _results(
    connection: Connection, conversation_id: uuid.UUID, call_ids: Sequence[str]
) -> dict[str, str | None]:
    """The committed results of these calls, by call id."""
    if not call_ids:
        return {}
    rows = connection.execute(
        select(messages.c.tool_call_id, messages.c.content).where(
            messages.c.conversation_id == conversation_id,
            messages.c.role == TOOL,
            messages.c.tool_call_id.in_(list(call_ids)),
        )
    ).all()
    return {row.tool_call_id: row.content for row in rows}


__all__ = ["Answered", "answer_actions", "waiting_clarifications", "waiting_turn"]
