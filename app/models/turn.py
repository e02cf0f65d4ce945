"""A turn: one user message (or a retry) to its end, the unit a web app tracks.

A conversation's turns are numbered 1, 2, ... in submission order; the conversation's
`turn_number` names the current one and `turn_count` the last submitted, so the turns between
them are waiting (`queued`) behind it. A waiting turn keeps its message in `input`, outside the
transcript, until the claim that starts it moves the message in (`message_seq`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JsonType, in_list
from app.vocabulary import FOR_MESSAGE, QUEUED, TURN_KINDS, TURN_STATUSES

MAX_IDEMPOTENCY_KEY_CHARS = 200


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("conversation_id", "number"),
        UniqueConstraint("conversation_id", "idempotency_key"),
        CheckConstraint(in_list("status", TURN_STATUSES), name="status"),
        CheckConstraint(in_list("kind", TURN_KINDS), name="kind"),
        CheckConstraint("number >= 1", name="number_positive"),
        # The runs across owners, newest first (the operators' list, `store/runs.py`).
        Index("ix_turns_created", "created_at", "id"),
        Index("ix_turns_status_created", "status", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=QUEUED, server_default=QUEUED)
    # What the turn waits for while `requires_action` (and after, for the record): one object per
    # call, {"call_id", "kind", "name", "arguments"} (and an approval's "decision"); answered
    # once the call has its result (or, approved, will run).
    actions: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    # The trace the turn belongs to (a W3C `traceparent` carrier of its submit's span), when
    # traced: whichever worker claims the turn continues it (app/telemetry/tracing.py).
    trace_context: Mapped[dict[str, str] | None] = mapped_column(JsonType)
    # The caller's own key-value pairs for the turn (OpenAI's `metadata`), shown back as given.
    caller_metadata: Mapped[dict[str, str] | None] = mapped_column(JsonType)
    # What the dialect that submitted the turn shows back of its request and keeps nowhere else
    # (the Responses API's `store` and `previous_response_id`), written with the turn; NULL:
    # nothing (a turn of our own API, or of the previous release).
    echo: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    kind: Mapped[str] = mapped_column(String(16), default=FOR_MESSAGE, server_default=FOR_MESSAGE)
    # The user's message: its seq once it is in the transcript; its text while it waits outside.
    message_seq: Mapped[int | None] = mapped_column(Integer)
    input: Mapped[str | None] = mapped_column(Text)
    # The files of the message while it waits outside the transcript (as `messages.files`).
    files: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    # Where the turn's own messages hang in the tree (its first message's parent): set for an
    # edit, a regenerate, a rollback (the active path is cut there when the turn starts); None
    # for a turn queued behind another until it starts (then the leaf). A turn that says nothing
    # once its message is placed or it starts (the previous release's) is given the leaf by a
    # trigger on PostgreSQL (migration 0023).
    parent_seq: Mapped[int | None] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(MAX_IDEMPOTENCY_KEY_CHARS))
    # The JSON Schema this message's answer must match, over the conversation's own.
    output_schema: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # The model the turn calls now when it is not the conversation's: a fallback it moved to
    # (committed with `model.fallback`, so a resumed turn goes on with the same model).
    model: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    # This turn's model calls only (the conversation's columns hold the running total).
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # US dollars of the turn's model calls; NULL once any call had no known price.
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(20, 10), default=0, server_default="0")
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    def __repr__(self) -> str:
        return f"<Turn {self.conversation_id}#{self.number} {self.status}>"
