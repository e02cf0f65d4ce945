"""An event of a conversation's append-only log, numbered by a gap-free `seq` in commit order.

Events are small: they name what changed (a message by its seq, a turn by its id, the new status)
and the reader joins the rows they name. Each is written in the same statement or transaction as
the state it describes, so the log and the tables agree after any crash.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Integer, String, Uuid
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JsonType, in_list
from app.vocabulary import EVENT_TYPES


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (
        CheckConstraint(in_list("type", EVENT_TYPES), name="type"),
        CheckConstraint("seq >= 1", name="seq_positive"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    type: Mapped[str] = mapped_column(String(32))
    # The turn it belongs to. No foreign key: events and turns only ever go together, with their
    # conversation, and a key would make every turn's deletion scan the log (`chatworker prune`).
    turn_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    message_seq: Mapped[int | None] = mapped_column(Integer)  # message.committed
    status: Mapped[str | None] = mapped_column(String(16))  # status.changed
    attempt: Mapped[int | None] = mapped_column(Integer)  # turn.started / turn.resumed
    data: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<Event {self.conversation_id}#{self.seq} {self.type}>"
