"""Forging a conversation's state for a test, the way a worker would have left it: the status,
its `status.changed` event, the current turn's status with its terminal event (and, for a
completed turn, its answer), so the invariants (tests/invariants.py) still hold afterwards."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, TextClause, Uuid, bindparam
from sqlalchemy import text as sql_text


def text(sql: str) -> TextClause:
    """SQL whose id parameters are UUIDs on every database (SQLite stores them as hex)."""
    clause = sql_text(sql)
    ids = [bindparam(name, type_=Uuid) for name in ("id", "cid", "turn") if f":{name}" in sql]
    return clause.bindparams(*ids)


TURN_OF = {"idle": "completed", "failed": "failed"}  # a running status leaves the turn as it is


_CURRENT = (
    "SELECT c.event_seq, c.status AS was, t.id, t.status FROM conversations c LEFT JOIN turns t"
    " ON t.conversation_id = c.id AND t.number = c.turn_number WHERE c.id = :id"
)
_ANSWER = (
    "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, is_error) SELECT"
    " :cid, coalesce(max(seq), 0) + 1, max(seq), 'assistant', 'forged by a test', false"
    " FROM messages WHERE conversation_id = :cid RETURNING seq"
)
_FINISH_TURN = (
    "UPDATE turns SET status = :status, started_at = coalesce(started_at, CURRENT_TIMESTAMP),"
    " finished_at = CURRENT_TIMESTAMP, error = :error WHERE id = :id"
)


def force_status(engine: Engine, conversation_id: uuid.UUID, status: str, **values: Any) -> None:
    """Set the conversation's `status` (and other columns), logged as a worker would log it."""
    with engine.begin() as connection:
        row = connection.execute(
            text(_CURRENT + (" FOR UPDATE OF c" if engine.dialect.name == "postgresql" else "")),
            {"id": conversation_id},
        ).one()
        turn_id = None if row.id is None else uuid.UUID(str(row.id))  # SQLite: hex text
        logged: list[dict[str, Any]] = []
        turn_status = TURN_OF.get(status, row.status)
        if turn_id is not None and row.status != turn_status:
            connection.execute(
                text(_FINISH_TURN),
                {
                    "status": turn_status,
                    "error": "forged by a test" if turn_status == "failed" else None,
                    "id": turn_id,
                },
            )
            if turn_status == "completed":  # (a completed turn ends with its answer)
                answer = connection.execute(text(_ANSWER), {"cid": conversation_id}).scalar()
                logged.append({"type": "message.committed", "message_seq": answer})
            logged.append({"type": f"turn.{turn_status}"})
        if status != row.was:
            logged.append({"type": "status.changed", "status": status})
        for offset, event in enumerate(logged, start=1):
            connection.execute(
                text(
                    "INSERT INTO events (conversation_id, seq, type, turn_id, status, message_seq)"
                    " VALUES (:cid, :seq, :type, :turn, :status, :message_seq)"
                ),
                {
                    "cid": conversation_id,
                    "seq": row.event_seq + offset,
                    "turn": turn_id,
                    "status": None,
                    "message_seq": None,
                    **event,
                },
            )
        assignments = ", ".join(f"{name} = :{name}" for name in values)
        error = "'forged by a test'" if status == "failed" else "error"
        connection.execute(
            text(
                f"UPDATE conversations SET status = :status, event_seq = :seq, error = {error}"
                + (f", {assignments}" if assignments else "")
                + " WHERE id = :id"
            ),
            {"status": status, "seq": row.event_seq + len(logged), "id": conversation_id, **values},
        )
