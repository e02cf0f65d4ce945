"""Files a user message carries (images, PDF, text): stored once per owner by content hash, in
the database, and the conversations that use them.

A file's id is derived from its owner and the SHA-256 of its bytes (`file_id`), so the same bytes
sent again by the same owner are the same row (an INSERT that finds it does nothing); another
owner's identical bytes are another row (an id reveals nothing across owners). Each conversation
whose messages hold a file has a `file_uses` row; a file goes when its last use does (a deleted
conversation, a pruned one: `client/store/files.py`). A message names its files in
`messages.files` (id, media type, name, size), a waiting turn in `turns.files` until its message
goes into the transcript.
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

#: The namespace of file ids: uuid5(FILES, owner + NUL + sha256 hex).
FILES_NAMESPACE = uuid.UUID("6d0c2f4e-8b1a-4c7e-9a53-2f6e1b7d4c90")
MAX_FILE_NAME_CHARS = 255


def file_id(owner: str | None, sha256: str) -> uuid.UUID:
    """The id of these bytes (their SHA-256, hex) for this owner."""
    return uuid.uuid5(FILES_NAMESPACE, f"{owner or ''}\x00{sha256}")


class File(Base):
    __tablename__ = "files"
    __table_args__ = (CheckConstraint("size >= 0", name="size_not_negative"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(100))  # checked from the bytes
    name: Mapped[str | None] = mapped_column(String(MAX_FILE_NAME_CHARS))  # the first sender's
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<File {self.id} {self.media_type} {self.size} bytes>"


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
