"""A compaction of a conversation's context: what the model is sent instead of the whole
transcript once it grows too long for the model's window. The transcript itself never changes.

Each row is a committed step of a turn (fenced like every step, `context.compacted` in the same
statement) and states the whole of what is compacted as of then, so the latest row alone says
what the model is sent: the tool outputs of messages up to `elided_through` by their session-cache
reference, and the messages up to `summarized_through` replaced by `summary` (which covers every
earlier summary too). A summary's range always ends where no tool call waits for its result.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    ForeignKey,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, BigIntId, in_list

ELIDE = "elide"  # earlier turns' tool outputs sent as references (no model call)
SUMMARY = "summary"  # the oldest messages replaced by a model-written summary
COMPACTION_KINDS = (ELIDE, SUMMARY)
THRESHOLD = "threshold"  # the next request would pass the conversation's threshold
OVERFLOW = "overflow"  # the provider refused the request as too long for its window
COMPACTION_REASONS = (THRESHOLD, OVERFLOW)


class Compaction(Base):
    __tablename__ = "compactions"
    __table_args__ = (
        UniqueConstraint("conversation_id", "number"),
        CheckConstraint(in_list("kind", COMPACTION_KINDS), name="kind"),
        CheckConstraint(in_list("reason", COMPACTION_REASONS), name="reason"),
        CheckConstraint("number >= 1", name="number_positive"),
        CheckConstraint(
            "elided_through >= 0 AND summarized_through >= 0", name="through_not_negative"
        ),
        CheckConstraint(
            "(summarized_through = 0) = (summary IS NULL)", name="summary_names_its_range"
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per conversation: the latest rules
    turn_id: Mapped[uuid.UUID] = mapped_column(Uuid)  # the turn that compacted
    kind: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(16))
    # This compaction's own range of messages (from_seq..through_seq), as the event tells it.
    from_seq: Mapped[int] = mapped_column(Integer)
    through_seq: Mapped[int] = mapped_column(Integer)
    # The whole state from now on: outputs elided up to, messages summarised up to (0: none).
    elided_through: Mapped[int] = mapped_column(Integer)
    summarized_through: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str | None] = mapped_column(Text)
    # The request's estimated size before and after, in tokens, and the window it had to fit.
    tokens_before: Mapped[int] = mapped_column(Integer)
    tokens_after: Mapped[int] = mapped_column(Integer)
    window: Mapped[int | None] = mapped_column(Integer)
    # The summary's model call (a summary only): its model and what it used.
    model: Mapped[str | None] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(20, 10))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    def __repr__(self) -> str:
        return f"<Compaction {self.conversation_id}#{self.number} {self.kind}>"
