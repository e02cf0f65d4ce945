"""The files a model call sends, read by id (the bytes of a user message's images, PDFs and
text files: `worker/files.py` puts them into the request)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import Engine, select

from app.client.attachments import CheckedFile, sniff
from app.models.tables import files


class FileBytes(NamedTuple):
    media_type: str
    name: str | None
    data: bytes


def checked(data: bytes, claimed: str, name: str | None) -> CheckedFile:
    """A tool's binary output as a file to keep: the type its bytes show, else the one the tool
    said (audio, a blob of another kind)."""
    found = sniff(data)
    media_type = found if found is not None and found != "text/plain" else claimed
    return CheckedFile(data, hashlib.sha256(data).hexdigest(), media_type, name)


def read_files(engine: Engine, ids: Collection[str]) -> dict[str, FileBytes]:
    """The files of `ids` that exist, by id (one query)."""
    if not ids:
        return {}
    query = select(files.c.id, files.c.media_type, files.c.name, files.c.data).where(
        files.c.id.in_([uuid.UUID(found) for found in ids])
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return {str(row.id): FileBytes(row.media_type, row.name, bytes(row.data)) for row in rows}


__all__ = ["FileBytes", "checked", "read_files"]
