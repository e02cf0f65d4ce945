"""The files of messages (`files`, `file_uses`): kept once per owner by content hash, read back
by id for their owner, and forgotten with the last conversation that uses them.

A file in use is never deleted under a message that names it: `keep` locks the file's row (its
INSERT ... ON CONFLICT DO UPDATE) before it records the use, and `forget` locks the candidates
(`FOR UPDATE`) before a DELETE that reads the uses in a statement of its own. Whichever comes
first, the other sees its commit: a use recorded first keeps the file; a file deleted first is
inserted again by the INSERT that waited for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, delete, exists, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.client.attachments import CheckedFile
from app.client.views import StoredFile
from app.errors import FileNotFound
from app.models import file_id
from app.models.tables import conversations, file_uses, files


def keep(
    connection: Connection,
    owner: str | None,
    conversation_id: uuid.UUID,
    checked: Sequence[CheckedFile],
) -> list[dict[str, Any]]:
    """Each file stored for `owner` (once: the same bytes are the same row) and used by the
    conversation; what the message keeps of them (`messages.files`)."""
    references = []
    for item in checked:
        found = file_id(owner, item.sha256)
        values = {
            "id": found,
            "owner": owner,
            "sha256": item.sha256,
            "media_type": item.media_type,
            "name": item.name,
            "size": len(item.data),
            "data": item.data,
        }
        connection.execute(_upsert(connection, files, values, lock=True))
        use = {"file_id": found, "conversation_id": conversation_id}
        connection.execute(_upsert(connection, file_uses, use, lock=False))
        references.append(item.reference(str(found)))
    return references


def _upsert(connection: Connection, table: Any, values: dict[str, Any], *, lock: bool) -> Any:
    """INSERT ... ON CONFLICT: DO NOTHING, or (`lock`) a no-op DO UPDATE, which locks the row
    that is there (PostgreSQL; SQLite has one writer at a time)."""
    keys = [column.name for column in table.primary_key.columns]
    if connection.dialect.name == "postgresql":
        statement = postgresql_insert(table).values(**values)
        if lock:
            return statement.on_conflict_do_update(
                index_elements=keys, set_={"id": statement.excluded.id}
            )
        return statement.on_conflict_do_nothing(index_elements=keys)
    return sqlite_insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)


def use(connection: Connection, found: Iterable[uuid.UUID], conversation_id: uuid.UUID) -> None:
    """The conversation uses these files too (a fork's copied messages hold them)."""
    for each in found:
        use = {"file_id": each, "conversation_id": conversation_id}
        connection.execute(_upsert(connection, file_uses, use, lock=False))


def read(connection: Connection, found: uuid.UUID, owner: str | None) -> StoredFile:
    """A file's bytes for `owner` (None: any); `FileNotFound` for another owner's."""
    query = select(files.c.media_type, files.c.name, files.c.data, files.c.owner).where(
        files.c.id == found
    )
    row = connection.execute(query).one_or_none()
    if row is None or (owner is not None and row.owner != owner):
        raise FileNotFound(f"no file {found}")
    return StoredFile(row.media_type, row.name, bytes(row.data))


def used_by(connection: Connection, conversation_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """The files the conversations use (before they are deleted)."""
    chosen = list(conversation_ids)
    if not chosen:
        return []
    query = select(file_uses.c.file_id).where(file_uses.c.conversation_id.in_(chosen)).distinct()
    return list(connection.execute(query).scalars())


def forget(connection: Connection, candidates: Sequence[uuid.UUID]) -> int:
    """Delete those of `candidates` no conversation uses any more; how many went."""
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


__all__ = ["conversation_setup", "forget", "keep", "read", "use", "used_by"]
