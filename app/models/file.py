"""Files a user message carries (images, PDF, text): stored once per owner by content hash, in
the database, the names they were sent under, and the conversations that use them.

A file's id is random (`uuid4`), chosen when its owner first sends its bytes; the same bytes sent
again by the same owner find that row by `(owner, sha256)` (`app/files/store.py`, under the
owner's storage lock), so an id says nothing about its bytes or its owner and cannot be guessed.
(Rows written before ids were random keep theirs, derived from owner and hash.) Each name (and
media type) an owner sent the bytes under is a `file_names` row with an id of its own, which is
what a message shows and `GET /v1/files/{id}` serves under that name. Each conversation whose
messages hold a file has a `file_uses` row; a file goes when its last use does (a deleted
conversation, a pruned one), its names with it. A message names its files in `messages.files`
(id, name_id, media type, name, size), a waiting turn in `turns.files` until its message goes
into the transcript.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    LargeBinary,
    String,
    Uuid,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base

MAX_FILE_NAME_CHARS = 255
#: The seed of an owner's storage lock (`hashtextextended(owner, seed)`): what keeps files once
#: per owner and counts the owner's stored bytes against its quota, one writer at a time.
STORAGE_LOCK_SEED = 11


class File(Base):
    __tablename__ = "files"
    __table_args__ = (
        CheckConstraint("size >= 0", name="size_not_negative"),
        # An owner's file of these bytes (kept once per owner) and the owner's stored bytes.
        Index("ix_files_owner_sha256", "owner", "sha256"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str | None] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(100))  # checked from the bytes
    # the first sender's: a message's name is its `file_names` row's
    name: Mapped[str | None] = mapped_column(String(MAX_FILE_NAME_CHARS))
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<File {self.id} {self.media_type} {self.size} bytes>"


class FileName(Base):
    """A name (and media type) an owner sent a file's bytes under: what a message shows, and
    what `GET /v1/files/{id}` serves the bytes as, by this row's own id."""

    __tablename__ = "file_names"
    __table_args__ = (Index("ix_file_names_file", "file_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    file_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"))
    name: Mapped[str | None] = mapped_column(String(MAX_FILE_NAME_CHARS))
    media_type: Mapped[str] = mapped_column(String(100))  # checked from the bytes
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )


class FileUse(Base):
    """A conversation whose messages hold the file: the file lives while one does."""

    __tablename__ = "file_uses"
    __table_args__ = (Index("ix_file_uses_conversation", "conversation_id"),)

    file_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("files.id", ondelete="CASCADE"), primary_key=True
    )
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
