"""A message of a conversation's transcript, which is also the journal the worker resumes from.

`seq` orders the transcript (unique per conversation; the worker keeps it gap-free). A tool result
is unique per (conversation, tool call id): that constraint is the exactly-once ledger of tools.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, BigIntId, JsonType

SYSTEM = "system"
USER = "user"
ASSISTANT = "assistant"
TOOL = "tool"
ROLES = (SYSTEM, USER, ASSISTANT, TOOL)
#: The result of a tool call the user's cancel left unanswered, whoever ends the turn (the worker
#: holding it, or the web side when no worker does): the transcript stays valid for every provider.
CANCELLED_CALL_RESULT = "Cancelled by the user: this tool call did not complete."
TOOL_RESULT_HAS_CALL_ID = (
    "(role = 'tool' AND tool_call_id IS NOT NULL) OR (role <> 'tool' AND tool_call_id IS NULL)"
)


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        UniqueConstraint("conversation_id", "tool_call_id"),
        CheckConstraint(f"role IN ({', '.join(repr(r) for r in ROLES)})", name="role"),
        CheckConstraint("seq >= 1", name="seq_positive"),
        # A tool result always answers a call, and only tool results carry a call id.
        CheckConstraint(TOOL_RESULT_HAS_CALL_ID, name="tool_result_has_call_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text)
    # [{"id": ..., "name": ..., "arguments": "<raw text from the model, possibly invalid JSON>"}]
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    tool_call_id: Mapped[str | None] = mapped_column(String(200))
    tool_name: Mapped[str | None] = mapped_column(String(200))
    is_error: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sql_text("false"))
    # Why the model stopped (assistant messages): "length" marks tool calls cut off mid-way.
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    # How a reply was streamed (assistant messages): {"attempt": its ordinal, "text": the length
    # of each live delta's text}, so a replay splits and numbers it as the live stream did.
    reply_stream: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # What the model call that wrote it used (assistant messages): prompt, completion, cached
    # and cache-write tokens, cost in US dollars.
    usage: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<Message {self.conversation_id}#{self.seq} {self.role}>"
