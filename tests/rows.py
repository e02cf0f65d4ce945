"""Forging a conversation's state for a test, the way a worker would have left it: the status,
its `status.changed` event, and the current turn's status with its terminal event, so the event
log's invariants still hold afterwards."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, text

TURN_OF = {"idle": "completed", "failed": "failed"}  # a running status leaves the turn as it is


def force_status(engine: Engine, conversation_id: uuid.UUID, status: str, **values: Any) -> None:
    """Set the conversation's `status` (and other columns), logged as a worker would log it."""
    with engine.begin() as connection:
        row = connection.execute(
            text(
                "SELECT c.event_seq, c.status AS was, t.id, t.status FROM conversations c LEFT JOIN turns t"
                " ON t.conversation_id = c.id AND t.number = c.turn_number WHERE c.id = :id"
                " FOR UPDATE OF c"
            ),
            {"id": conversation_id},
        ).one()
        logged: list[dict[str, Any]] = []
        turn_status = TURN_OF.get(status, row.status)
        if row.id is not None and row.status != turn_status:
            connection.execute(
                text(
                    "UPDATE turns SET status = :status, started_at = coalesce(started_at, now()),"
                    " finished_at = now(), error = :error WHERE id = :id"
                ),
                {
                    "status": turn_status,
                    "error": "forged by a test" if turn_status == "failed" else None,
                    "id": row.id,
                },
            )
            logged.append({"type": f"turn.{turn_status}", "status": None})
        if status != row.was:
            logged.append({"type": "status.changed", "status": status})
        for offset, event in enumerate(logged, start=1):
            connection.execute(
                text(
                    "INSERT INTO events (conversation_id, seq, type, turn_id, status)"
                    " VALUES (:cid, :seq, :type, :turn, :status)"
                ),
                {"cid": conversation_id, "seq": row.event_seq + offset, "turn": row.id, **event},
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
