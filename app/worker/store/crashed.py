"""A claim that crashed before its run began (the claim committed, then building the turn from
what it read raised): the lease this worker took is given back, and what the crash handler needs
to go on is read in the same statement (`crashes.claim_crashed`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select, update

from app.models import RELEASED_LEASE, RUNNING_STATUSES
from app.models.tables import conversations, turns

c = conversations.c


@dataclass(frozen=True)
class CrashedClaim:
    """The lease this worker held, now given back: its epoch still fences a FAIL."""

    epoch: int
    turn_id: uuid.UUID
    status: str
    attempts: int  # the crashed claim's own included
    cancel_requested: bool


def release_crashed_claim(
    engine: Engine, conversation_id: uuid.UUID, owner: str, now: datetime
) -> CrashedClaim | None:
    """Give back the lease `owner` holds on a running conversation (whatever its epoch: the
    crashed claim never told its caller); None when it holds none (the claim did not commit)."""
    release = (
        update(conversations)
        .where(
            c.id == conversation_id,
            c.lease_owner == owner,
            c.status.in_(RUNNING_STATUSES),
        )
        .values(heartbeat_at=now, updated_at=now, **RELEASED_LEASE)
        .returning(c.lease_epoch, c.status, c.attempts, c.turn_number)
    )
    with engine.begin() as connection:
        held = connection.execute(release).first()
        if held is None:
            return None
        turn = connection.execute(
            select(turns.c.id, turns.c.cancel_requested_at).where(
                turns.c.conversation_id == conversation_id, turns.c.number == held.turn_number
            )
        ).first()
    if turn is None:
        return None
    return CrashedClaim(
        held.lease_epoch, turn.id, held.status, held.attempts, turn.cancel_requested_at is not None
    )


__all__ = ["CrashedClaim", "release_crashed_claim"]
