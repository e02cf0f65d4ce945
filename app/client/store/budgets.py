"""Budgets set, listed and removed by the operator (the spend both sides read, and whether a budget
is used up, is in `app/budgets/store.py`). The values set are checked by `checks.check_budget`.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from sqlalchemy import ColumnElement, Connection, delete, insert, select

from app.budgets.store import limits
from app.client.views import BudgetView
from app.errors import ConversationNotFound
from app.models.tables import budgets, conversations


def set_budget(
    connection: Connection,
    *,
    owner: str | None,
    conversation_id: uuid.UUID | None,
    period: str,
    max_tokens: int | None,
    max_cost_usd: Decimal | None,
) -> None:
    """Replace the subject's budget of that period (values checked by `checks.check_budget`)."""
    if conversation_id is not None:
        found = connection.execute(
            select(conversations.c.id).where(conversations.c.id == conversation_id)
        ).first()
        if found is None:
            raise ConversationNotFound(f"conversation {conversation_id} not found")
    connection.execute(delete(budgets).where(*_subject(owner, conversation_id, period)))
    connection.execute(
        insert(budgets).values(
            owner=owner,
            conversation_id=conversation_id,
            period=period,
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
        )
    )


def remove_budget(
    connection: Connection, *, owner: str | None, conversation_id: uuid.UUID | None, period: str
) -> bool:
    """Whether there was one to remove."""
    removed = connection.execute(delete(budgets).where(*_subject(owner, conversation_id, period)))
    return bool(removed.rowcount)


def list_budgets(connection: Connection, owner: str | None = None) -> list[BudgetView]:
    query = limits()
    if owner is not None:
        owned = select(conversations.c.id).where(conversations.c.owner == owner)
        query = query.where(
            (budgets.c.owner == owner) | budgets.c.conversation_id.in_(owned.scalar_subquery())
        )
    return [
        BudgetView(o, c, p, t, None if m is None else float(m), at)
        for o, c, p, t, m, at in connection.execute(query)
    ]


def _subject(
    owner: str | None, conversation_id: uuid.UUID | None, period: str
) -> list[ColumnElement[bool]]:
    subject = (
        budgets.c.owner == owner
        if owner is not None
        else budgets.c.conversation_id == conversation_id
    )
    return [subject, budgets.c.period == period]


__all__ = ["list_budgets", "remove_budget", "set_budget"]
