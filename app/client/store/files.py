"""A message's file read back by its owner (`GET /v1/files/{id}`): by the id of the name it was
sent under (or, for a message kept before names had ids, by the file's own id), the owner in the
query, the bytes read only once both are found, so another owner's file costs what no file does.
(Keeping, using and forgetting files is SQL both sides run: `app/files/store.py`.)"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, select

from app.client.views import StoredFile
from app.errors import FileNotFound
from app.models.tables import file_names, files


def read(connection: Connection, found: uuid.UUID, owner: str | None) -> StoredFile:
    """A file's bytes for `owner` (None: any), served as the name `found` names; `FileNotFound`
    for another owner's, or no such id."""
    named = select(files.c.id, file_names.c.media_type, file_names.c.name).join(
        files, files.c.id == file_names.c.file_id
    )
    named = named.where(file_names.c.id == found)
    own = select(files.c.id, files.c.media_type, files.c.name).where(files.c.id == found)
    if owner is not None:
        named = named.where(files.c.owner == owner)
        own = own.where(files.c.owner == owner)
    row = connection.execute(named).one_or_none() or connection.execute(own).one_or_none()
    data = None
    if row is not None:  # (gone since, by its last use's delete: as if it never was)
        data = connection.execute(select(files.c.data).where(files.c.id == row.id)).scalar()
    if row is None or data is None:
        raise FileNotFound(f"no file {found}")
    return StoredFile(row.media_type, row.name, bytes(data))


__all__ = ["read"]
