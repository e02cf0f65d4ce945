"""Per-owner limits from the web side (`CHATWORKER_OWNER_LIMIT_POLICY=reject`): a message or a
retry that would start one more running turn for an owner already running its
`CHATWORKER_OWNER_MAX_RUNNING_TURNS` is refused (`TooManyRunningTurns`, 429 with `Retry-After`
at the API), in the same transaction, so nothing is written.

Submits and worker claims of one owner take the same advisory lock (PostgreSQL; SQLite has one
writer at a time) before they count, so two at once cannot both see room for one. With the
`queue` policy nothing is refused here: the worker's claim makes the turn wait instead
(`app/worker/store/fence.py`, `CLAIM_LIMITED`).
"""

from __future__ import annotations

import uuid
from typing import cast as typed

from sqlalchemy import Connection, Table, func, select

from app.errors import TooManyRunningTurns
from app.models import OWNER_LOCK_SEED, RUNNING_STATUSES, Conversation

conversations = typed(Table, Conversation.__table__)

RETRY_AFTER_SECONDS = 5


def lock_owner(connection: Connection, conversation_id: uuid.UUID) -> str | None:
    """The conversation's owner, its limit lock held until the transaction ends."""
    owner = connection.execute(
        select(conversations.c.owner).where(conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    if owner is not None and connection.dialect.name == "postgresql":
        connection.execute(
            select(func.pg_advisory_xact_lock(func.hashtextextended(owner, OWNER_LOCK_SEED)))
        )
    return typed(str | None, owner)


def refuse_past_limit(connection: Connection, owner: str, limit: int) -> None:
    """`TooManyRunningTurns` when the owner's running conversations (this transaction's new
    turn counted) are more than `limit`."""
    running = connection.execute(
        select(func.count())
        .select_from(conversations)
        .where(conversations.c.owner == owner, conversations.c.status.in_(RUNNING_STATUSES))
    ).scalar_one()
    if running > limit:
        raise TooManyRunningTurns(
            f"owner {owner!r} already runs {running - 1} turns, its limit; retry when one "
            f"has ended (in {RETRY_AFTER_SECONDS} s)",
            RETRY_AFTER_SECONDS,
        )


__all__ = ["RETRY_AFTER_SECONDS", "lock_owner", "refuse_past_limit"]
