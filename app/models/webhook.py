"""Webhooks: the URLs an owner (or one conversation) is told about a turn's end at, and the
outbox of what is to be told.

A `Webhook` names an owner or one conversation, a URL, its Standard Webhooks signing secret and
the event types it wants (`turn.completed`, `turn.failed`, `turn.cancelled`,
`turn.requires_action`). A `WebhookDelivery` is one message to one webhook: the database writes
it itself, by a trigger on `events` (migration 0014), in the same transaction as the terminal
event it tells of, whoever appends that event (the worker's fenced statement, the web side's
cancel, the janitor). So a committed end always has its deliveries and a rolled-back one never
does. The workers deliver them (`app/worker/webhook_dispatcher.py`) at least once: a `pending`
row is claimed for a while (`next_attempt_at` moved past the attempt), sent, then `delivered`, or
scheduled again with a growing wait, or `failed` after the last one.

A delivery's fields are copied from the event and its turn when the trigger runs and never
change, so every attempt sends the same body under the same `webhook-id`, and a delivery
outlives the conversation it tells of (no foreign key to it).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, BigIntId, in_list
from app.vocabulary import (
    DELIVERY_STATUSES,
    PENDING,
    STANDARD_BODY,
    WEBHOOK_EVENT_TYPES,
)

MAX_URL_CHARS = 2000


class Webhook(Base):
    __tablename__ = "webhooks"
    __table_args__ = (
        CheckConstraint("(owner IS NULL) OR (conversation_id IS NULL)", name="one_subject"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    # An owner's webhook hears of all its conversations; with `conversation_id`, only that one.
    # Neither: the conversations without an owner (auth mode `none`).
    owner: Mapped[str | None] = mapped_column(String(200), index=True)
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    url: Mapped[str] = mapped_column(String(MAX_URL_CHARS))
    secret: Mapped[str] = mapped_column(String(100))  # whsec_<base64>: it signs, so it is kept
    # The types it wants, space-separated with a space at each end (" turn.completed turn.failed "),
    # so the trigger matches one with LIKE on every database.
    event_types: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    # The bodies' shape: ours (`standard`), or OpenAI's webhook events (`openai`: `response.*`
    # naming the response, for a team that uses /v1/responses and the openai SDK's `unwrap`).
    body_format: Mapped[str] = mapped_column(
        String(16), default=STANDARD_BODY, server_default=sql_text("'standard'")
    )


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint(in_list("status", DELIVERY_STATUSES), name="status"),
        CheckConstraint(in_list("type", WEBHOOK_EVENT_TYPES), name="type"),
        UniqueConstraint("webhook_id", "conversation_id", "event_seq"),
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=sql_text("status = 'pending'"),
            sqlite_where=sql_text("status = 'pending'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    webhook_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    # What it tells of, copied when the event was appended (no foreign keys: it outlives them).
    conversation_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    event_seq: Mapped[int] = mapped_column(Integer)
    turn_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    type: Mapped[str] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Its delivery.
    status: Mapped[str] = mapped_column(String(16), default=PENDING, server_default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )


_MESSAGE_IDS = uuid.UUID("5f1d0c0e-8b1a-4c36-9d59-0c5d2b8e7a11")


def message_id(webhook_id: uuid.UUID, conversation_id: uuid.UUID, event_seq: int) -> str:
    """A delivery's `webhook-id`: the same on every attempt, unique across webhooks, events and
    databases (a receiver deduplicates by it)."""
    name = f"{webhook_id}:{conversation_id}:{event_seq}"
    return f"msg_{uuid.uuid5(_MESSAGE_IDS, name).hex}"
