"""An owner's running turns, as the web side reads them for the `reject` owner limit
(`CHATWORKER_OWNER_LIMIT_POLICY=reject`; the refusal itself is `admission`'s).

Submits and worker claims of one owner take the same advisory lock (PostgreSQL; SQLite has one
writer at a time) before they count, so two at once cannot both see room for one. With the
`queue` policy nothing is refused on the web side: the worker's claim makes the turn wait instead
(`app/worker/store/fence.py`, `CLAIM_LIMITED`).
"""

from __future__ import annotations

import uuid
from typing import cast

from sqlalchemy import Connection, func, select

from app.models import OWNER_LOCK_SEED, RUNNING_STATUSES
from app.models.tables import conversations


def lock_owner(connection: Connection, conversation_id: uuid.UUID) -> str | None:
    """The conversation's owner, its limit lock held until the transaction ends."""
    owner = connection.execute(
        select(conversations.c.owner).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if owner is not None and connection.dialect.name == "postgresql":
        connection.execute(
            select(func.pg_advisory_xact_lock(func.hashtextextended(owner, OWNER_LOCK_SEED)))
        )
    return cast(str | None, owner)


def running_conversations(connection: Connection, owner: str) -> int:
    """How many of the owner's conversations run a turn now (read under its limit lock)."""
    return int(
        connection.execute(
            select(func.count())
            .select_from(conversations)
            .where(conversations.c.owner == owner, conversations.c.status.in_(RUNNING_STATUSES))
        ).scalar_one()
    )


__all__ = ["lock_owner", "running_conversations"]
