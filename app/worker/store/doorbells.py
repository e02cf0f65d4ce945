"""Queued turns whose doorbell may be lost: running conversations no worker holds, untouched for a
few seconds, found through their own partial index (`ix_conversations_queued`).

A queued turn is taken within milliseconds of its doorbell; one that waits longer lost it (Redis
flushed, restarted without its data, down when the message was accepted) or waits for a slot
(its owner's limit, a full worker), where one more ring is harmless: the claim decides. Read
under the sweep lock (`upkeep.take_sweep_lock`), by one worker a round.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Connection, DateTime, Integer, bindparam, select, text

from app.models import UNHELD_SQL
from app.models.tables import conversations

c = conversations.c

#: Queued, untouched since `:cutoff`: the index's own WHERE, as constants, so even a prepared
#: statement's generic plan reads the index (a bound status list would not prove it applies).
QUEUED_SINCE = (
    select(c.id, c.attempts)
    .where(text(UNHELD_SQL), c.heartbeat_at < bindparam("cutoff", type_=DateTime(timezone=True)))
    .order_by(c.heartbeat_at)
    .limit(bindparam("limit", type_=Integer))
)


def queued_since(
    connection: Connection, cutoff: datetime, limit: int
) -> list[tuple[uuid.UUID, int]]:
    """Queued conversations untouched since `cutoff`, the longest waiting first, with their
    attempts."""
    rows = connection.execute(QUEUED_SINCE, {"cutoff": cutoff, "limit": limit}).all()
    return [(row.id, row.attempts) for row in rows]


__all__ = ["QUEUED_SINCE", "queued_since"]
