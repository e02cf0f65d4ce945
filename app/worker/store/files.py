"""The files a model call sends, read for the conversation (the bytes of a user message's
images, PDFs and text files: `worker/files.py` puts them into the request), and a tool's binary
output checked as a file to keep (`app/files/store.py` keeps it)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection

from sqlalchemy import Engine, select

from app.files.media import CheckedFile, sniff
from app.models.tables import conversations, file_uses, files


def checked(data: bytes, claimed: str, name: str | None) -> CheckedFile:
    """A tool's binary output as a file to keep: the type its bytes show, else the one the tool
    said (audio, a blob of another kind)."""
    found = sniff(data)
    media_type = found if found is not None and found != "text/plain" else claimed
    return CheckedFile(data, hashlib.sha256(data).hexdigest(), media_type, name)


def read_files(
    engine: Engine, conversation_id: uuid.UUID, ids: Collection[uuid.UUID]
) -> dict[uuid.UUID, bytes]:
    """The bytes of those of `ids` that belong to the conversation's owner and that the
    conversation uses (`file_uses`), by id (one query: any other id is simply not found)."""
    if not ids:
        return {}
    owner = select(conversations.c.owner).where(conversations.c.id == conversation_id)
    used = select(file_uses.c.file_id).where(file_uses.c.conversation_id == conversation_id)
    query = select(files.c.id, files.c.data).where(
        files.c.id.in_(list(ids)),
        files.c.id.in_(used),
        files.c.owner.is_not_distinct_from(owner.scalar_subquery()),
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return {uuid.UUID(str(row.id)): bytes(row.data) for row in rows}


__all__ = ["checked", "read_files"]
