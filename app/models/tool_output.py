"""The session tool cache: the whole output of every MCP call a conversation made.

The model's context holds a compact version of each output (the tool message, capped with a
marker); the whole text stays here, outside the prompt, for the worker's built-in tools
`session_cache_list` and `session_cache_get` to page through on any later turn. Each row answers
exactly one tool message (a foreign key to it), written in the same statement, and goes with it
(so with its conversation).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Integer,
    String,
    Text,
    Uuid,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JsonType


class ToolOutput(Base):
    __tablename__ = "tool_outputs"
    __table_args__ = (
        # The tool message it is the whole of: no output without its message, and none after it.
        ForeignKeyConstraint(
            ["conversation_id", "call_id"],
            ["messages.conversation_id", "messages.tool_call_id"],
            ondelete="CASCADE",
            name="fk_tool_outputs_message",
        ),
        CheckConstraint("chars >= 0", name="chars_not_negative"),
    )

    # The one foreign key, to the tool message, also removes the row with its conversation; a
    # key to `conversations` or `turns` would only add a check to every MCP call's step.
    conversation_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    call_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The turn of the call (its message's); None in a fork, whose copied messages have no turn.
    turn_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    seq: Mapped[int] = mapped_column(Integer)  # the tool message's
    tool: Mapped[str] = mapped_column(String(200))  # the name the model called
    arguments: Mapped[dict[str, Any]] = mapped_column(JsonType)
    content: Mapped[str] = mapped_column(Text)
    chars: Mapped[int] = mapped_column(Integer)  # len(content), in characters
    is_error: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sql_text("false"))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<ToolOutput {self.conversation_id}/{self.call_id} {self.chars} chars>"
