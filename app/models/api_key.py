"""An API key: who may call the HTTP API, and as which owner.

The secret is shown once, when the key is made, and only its SHA-256 is stored: a key is 32
random bytes, so a fast hash is enough (nothing to brute-force), and a stolen table reveals no key.
A revoked key keeps its row, so `chatworker keys list` still shows who had access and until when.
An operator's key (`operator`, its text `cwo_...`) reads and acts on every owner's runs through
the operator routes and nothing else; its `owner` is the operator's name, in the audit log.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, DateTime, String
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base

MAX_OWNER_CHARS = 200


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(MAX_OWNER_CHARS), index=True)
    name: Mapped[str] = mapped_column(String(200), default="", server_default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    operator: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sql_text("false"))

    def __repr__(self) -> str:
        return f"<ApiKey {self.id} {self.owner}>"
