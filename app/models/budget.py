"""Budgets: a cap on the tokens and the money an owner, or one conversation, may spend, in
total or per UTC day. Checked against committed totals (`app/budgets/store.py`): by the
worker before each model call, and by the web side before it accepts a message.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Integer,
    Numeric,
    String,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, in_list
from app.vocabulary import PERIODS


class Budget(Base):
    __tablename__ = "budgets"
    __table_args__ = (
        # Exactly one subject: an owner, or one conversation.
        CheckConstraint("(owner IS NULL) <> (conversation_id IS NULL)", name="one_subject"),
        CheckConstraint("max_tokens IS NOT NULL OR max_cost_usd IS NOT NULL", name="a_limit"),
        CheckConstraint("max_tokens IS NULL OR max_tokens >= 0", name="tokens_not_negative"),
        CheckConstraint("max_cost_usd IS NULL OR max_cost_usd >= 0", name="cost_not_negative"),
        CheckConstraint(in_list("period", PERIODS), name="period"),
        UniqueConstraint("owner", "period"),
        UniqueConstraint("conversation_id", "period"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str | None] = mapped_column(String(200), index=True)
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    period: Mapped[str] = mapped_column(String(16))
    max_tokens: Mapped[int | None] = mapped_column(BigInteger)
    max_cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(20, 10))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
