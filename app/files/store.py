"""The SQL of files both sides run (the web side for a message's files, the worker for a tool's
images and blobs, and for pruning): a file kept once per owner by content hash, under a random
id; the names it was sent under; the conversations that use it; the files no conversation uses
forgotten.

A file in use is never deleted under a message that names it: `keep` locks the file's row
(`FOR UPDATE`) before it records the use, and `forget` locks the candidates before a DELETE that
reads the uses in a statement of its own. Whichever comes first, the other sees its commit: a
use recorded first keeps the file; a file deleted first is not found by the lock that waited for
it, and is stored again under a new id. Two keeps of one owner take the owner's storage lock
(PostgreSQL; SQLite has one writer at a time), so one owner's bytes are one row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, delete, exists, func, insert, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.files.media import CheckedFile
from app.models import STORAGE_LOCK_SEED
from app.models.tables import conversations, file_names, file_uses, files


def lock_storage(connection: Connection, owner: str | None) -> None:
    """The owner's storage lock, held until the transaction ends (PostgreSQL: an advisory lock;
    SQLite: its one writer)."""
    if connection.dialect.name == "postgresql":
        key = func.hashtextextended(owner or "", STORAGE_LOCK_SEED)
        connection.execute(select(func.pg_advisory_xact_lock(key)))


def keep(
    connection: Connection,
    owner: str | None,
    conversation_id: uuid.UUID,
    checked: Sequence[CheckedFile],
) -> list[dict[str, Any]]:
    """Each file stored for `owner` (once: the same bytes are the same row) under the name it
    was sent with, and used by the conversation; what the message keeps of them
    (`messages.files`). Takes the owner's storage lock."""
    lock_storage(connection, owner)
    references = []
    for item in checked:
        found = _stored(connection, owner, item)
        use(connection, (found,), conversation_id)
        named = _named(connection, found, item)
        references.append(item.reference(str(found), str(named)))
    return references


def _stored(connection: Connection, owner: str | None, item: CheckedFile) -> uuid.UUID:
    """The id of the owner's file of these bytes, its row locked; a new one (a random id) when
    the owner has none."""
    query = (
        select(files.c.id)
        .where(files.c.owner.is_not_distinct_from(owner), files.c.sha256 == item.sha256)
        .order_by(files.c.created_at)
        .limit(1)
    )
    if connection.dialect.name == "postgresql":
        query = query.with_for_update()
    found = connection.execute(query).scalar_one_or_none()
    if found is not None:
        return uuid.UUID(str(found))
    new = uuid.uuid4()
    values = {
        "id": new,
        "owner": owner,
        "sha256": item.sha256,
        "media_type": item.media_type,
        "name": item.name,
        "size": len(item.data),
        "data": item.data,
    }
    connection.execute(insert(files).values(**values))
    return new


def _named(connection: Connection, file_id: uuid.UUID, item: CheckedFile) -> uuid.UUID:
    """The id of the file's name and media type as sent (one row each: under the owner's lock)."""
    found = connection.execute(
        select(file_names.c.id)
        .where(
            file_names.c.file_id == file_id,
            file_names.c.name.is_not_distinct_from(item.name),
            file_names.c.media_type == item.media_type,
        )
        .limit(1)
    ).scalar_one_or_none()
    if found is not None:
        return uuid.UUID(str(found))
    new = uuid.uuid4()
    values = {"id": new, "file_id": file_id, "name": item.name, "media_type": item.media_type}
    connection.execute(insert(file_names).values(**values))
    return new


def use(connection: Connection, found: Iterable[uuid.UUID], conversation_id: uuid.UUID) -> None:
    """The conversation uses these files (a message or a fork's copied messages hold them)."""
    for each in found:
        values = {"file_id": each, "conversation_id": conversation_id}
        if connection.dialect.name == "postgresql":
            statement: Any = postgresql_insert(file_uses).values(**values)
        else:
            statement = sqlite_insert(file_uses).values(**values)
        connection.execute(statement.on_conflict_do_nothing())


def used_by(connection: Connection, conversation_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """The files the conversations use (before they are deleted)."""
    chosen = list(conversation_ids)
    if not chosen:
        return []
    query = select(file_uses.c.file_id).where(file_uses.c.conversation_id.in_(chosen)).distinct()
    return list(connection.execute(query).scalars())


def forget(connection: Connection, candidates: Sequence[uuid.UUID]) -> int:
    """Delete those of `candidates` no conversation uses any more (their names with them); how
    many went."""
    if not candidates:
        return 0
    locking = select(files.c.id).where(files.c.id.in_(candidates))
    if connection.dialect.name == "postgresql":
        locking = locking.with_for_update()
    locked = list(connection.execute(locking).scalars())
    if not locked:
        return 0
    unused = ~exists().where(file_uses.c.file_id == files.c.id)
    gone = connection.execute(delete(files).where(files.c.id.in_(locked), unused))
    return int(gone.rowcount or 0)


def conversation_setup(
    connection: Connection, conversation_id: uuid.UUID
) -> tuple[str, str | None]:
    """The conversation's model and owner (what its files are checked against and owned by)."""
    row = connection.execute(
        select(conversations.c.model, conversations.c.owner).where(
            conversations.c.id == conversation_id
        )
    ).one()
    return str(row.model), row.owner


__all__ = ["conversation_setup", "forget", "keep", "lock_storage", "use", "used_by"]
