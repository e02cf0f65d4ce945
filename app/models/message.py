"""A message of a conversation's transcript, which is also the journal the worker resumes from.

`seq` numbers a conversation's messages in commit order, over every branch (unique per
conversation, gap-free). The messages form a tree: each names its `parent_seq` (None: a first
message), always an older one, so a path's seqs only grow. The messages on the conversation's
active path, from a root to its newest message (the **leaf**, the largest active seq), are
`active`: what the model is sent and the API shows by default; an edit, a regenerate, a switch or
a rollback moves the path, and every other version stays, inactive. A tool result is unique per
(conversation, tool call id): that constraint is the exactly-once ledger of tools.
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
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, BigIntId, JsonType
from app.vocabulary import ROLES

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
        # A parent is always an older message: the tree has no cycle, a path's seqs only grow.
        CheckConstraint("parent_seq IS NULL OR parent_seq < seq", name="parent_is_older"),
        # The active path in order: what a claim reads and the API shows.
        Index(
            "ix_messages_active_path",
            "conversation_id",
            "seq",
            postgresql_where=sql_text("active"),
            sqlite_where=sql_text("active"),
        ),
        # The other branches' messages: whether a conversation has versions at all (a read of
        # its path looks for siblings only then), and their results' call ids (a claim makes
        # new ones unique against them). Written only when a message leaves the path: free for
        # the worker's inserts.
        Index(
            "ix_messages_inactive",
            "conversation_id",
            "tool_call_id",
            postgresql_where=sql_text("NOT active"),
            sqlite_where=sql_text("NOT active"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    # The message it answers or follows (None: a first message, a root); its siblings share it.
    # Every insert names it. On PostgreSQL one that does not (the previous release, during an
    # upgrade) gets -1, which a trigger makes the leaf (migration 0023; docs/OPERATIONS.md).
    parent_seq: Mapped[int | None] = mapped_column(Integer)
    # On the conversation's active path (`Message`'s docstring).
    # (no Python-side default: the worker's prebuilt INSERT ... SELECT leaves it to the server)
    active: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("true"))
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
    # A structured answer's parsed object (the turn asked for a JSON Schema and it matched). An
    # answer that did not match is kept with `is_error` (the model was asked once to repair it).
    output: Mapped[Any] = mapped_column(JsonType, nullable=True)
    # Why a structured answer was refused (`is_error`): the schema's violation, as the model
    # was told it when asked to repair the answer.
    output_error: Mapped[str | None] = mapped_column(Text)
    # The files a user message carries (`app/models/file.py`), in order: [{"id", "media_type",
    # "name", "size"}]; None: text only.
    files: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<Message {self.conversation_id}#{self.seq} {self.role}>"
