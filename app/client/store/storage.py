"""What an owner stores, in bytes, as its quota counts it (`CHATWORKER_OWNER_STORAGE_BYTES`): its
files' bytes (each once, however many messages carry it), the text of its conversations'
messages (a fork's copies too) and the tool outputs they keep. Read under the owner's storage
lock (`app/files/store.py` `lock_storage`), so two uploads or forks at once cannot both see room
for one.

A count reads the owner's rows (the files by `ix_files_owner_sha256`, the conversations by
`ix_conversations_owner_created`, their messages and outputs by conversation): it runs only for
what the quota guards, a message with files and a fork, not for every message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, LargeBinary, cast, func, select

from app.errors import ConversationNotFound
from app.models.tables import conversations, files, messages, tool_outputs


def owner_of(connection: Connection, conversation_id: uuid.UUID) -> str | None:
    """The conversation's owner; `ConversationNotFound` when there is no such conversation."""
    row = connection.execute(
        select(conversations.c.owner).where(conversations.c.id == conversation_id)
    ).one_or_none()
    if row is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return None if row.owner is None else str(row.owner)


def stored_bytes(connection: Connection, owner: str | None) -> int:
    """The bytes the owner stores now (one statement)."""
    owned = select(conversations.c.id).where(_owned(conversations.c.owner, owner))
    kept = select(func.coalesce(func.sum(files.c.size), 0)).where(_owned(files.c.owner, owner))
    return _sum(connection, owned, kept.scalar_subquery())


def conversation_bytes(connection: Connection, conversation_id: uuid.UUID) -> int:
    """The bytes of one conversation's messages and kept outputs (a fork's, as copied)."""
    return _sum(connection, [conversation_id], 0)


def new_bytes(connection: Connection, owner: str | None, sizes: Mapping[str, int]) -> int:
    """Of the files `sizes` names (sha256 -> bytes), the bytes the owner does not store yet."""
    if not sizes:
        return 0
    kept = connection.execute(
        select(files.c.sha256).where(_owned(files.c.owner, owner), files.c.sha256.in_(list(sizes)))
    ).scalars()
    return sum(sizes.values()) - sum(sizes[sha] for sha in set(kept))


def _sum(connection: Connection, owned: Any, extra: Any) -> int:
    length = _octets(connection)
    in_messages = select(func.coalesce(func.sum(length(messages.c.content)), 0)).where(
        messages.c.conversation_id.in_(owned)
    )
    in_outputs = select(func.coalesce(func.sum(length(tool_outputs.c.content)), 0)).where(
        tool_outputs.c.conversation_id.in_(owned)
    )
    total = in_messages.scalar_subquery() + in_outputs.scalar_subquery() + extra
    return int(connection.execute(select(total)).scalar_one())


def _octets(connection: Connection) -> Any:
    """A text column's length in bytes (PostgreSQL: without reading a long value whole)."""
    if connection.dialect.name == "postgresql":
        return func.octet_length
    return lambda column: func.length(cast(column, LargeBinary))


def _owned(column: Any, owner: str | None) -> Any:
    """The rows of `owner` (None: the rows without one), in a form an index serves."""
    return column.is_(None) if owner is None else column == owner


__all__ = ["conversation_bytes", "new_bytes", "owner_of", "stored_bytes"]
