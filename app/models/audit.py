"""The audit log: every operator action (a retry, a cancel, a bulk action), who took it, on
what, how many it selected and when. Written in the action's own transaction; reading is not
logged. Rows are never updated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Index, Integer, String, Text
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.api_key import MAX_OWNER_CHARS
from app.models.base import Base, BigIntId, JsonType


class AuditEntry(Base):
    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    operator: Mapped[str] = mapped_column(String(MAX_OWNER_CHARS))  # the key's name, a sub
    action: Mapped[str] = mapped_column(String(64))  # e.g. turn.cancel
    target: Mapped[str] = mapped_column(Text)  # a turn's or conversation's id, a filter
    selected: Mapped[int] = mapped_column(Integer)  # how many it acted on
    detail: Mapped[dict[str, Any] | None] = mapped_column(JsonType)

    def __repr__(self) -> str:
        return f"<AuditEntry {self.id} {self.operator} {self.action}>"
