"""Budgets, from the web side: set one (replacing the subject's budget of the same period), list
them, remove one. Each bad value is an `InvalidRequest` naming it, and writes nothing; what a
budget does is in `app/budgets.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import cast as typed

from sqlalchemy import ColumnElement, Connection, Table, delete, insert, select

from app.errors import ConversationNotFound, InvalidRequest
from app.models import PERIODS, Budget, Conversation

budgets = typed(Table, Budget.__table__)
conversations = typed(Table, Conversation.__table__)


@dataclass(frozen=True)
class BudgetView:
    owner: str | None
    conversation_id: uuid.UUID | None
    period: str  # total | day (UTC)
    max_tokens: int | None
    max_cost_usd: float | None
    created_at: datetime


def checked(
    owner: str | None,
    conversation_id: uuid.UUID | None,
    period: str,
    max_tokens: int | None,
    max_cost_usd: float | str | None,
) -> tuple[int | None, Decimal | None]:
    """The limits as stored, or the `InvalidRequest` naming what is wrong."""
    if (owner is None) == (conversation_id is None):
        raise InvalidRequest("a budget is an owner's or one conversation's: give exactly one")
    if owner is not None and not (isinstance(owner, str) and owner.strip()):
        raise InvalidRequest(f"owner must be a non-empty string, not {owner!r}")
    if period not in PERIODS:
        raise InvalidRequest(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    if max_tokens is None and max_cost_usd is None:
        raise InvalidRequest("a budget needs max_tokens, max_cost_usd or both")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
    ):
        raise InvalidRequest(f"max_tokens must be a whole number >= 0, not {max_tokens!r}")
    cost = None
    if max_cost_usd is not None:
        try:
            cost = Decimal(str(max_cost_usd))
        except InvalidOperation:
            raise InvalidRequest(f"max_cost_usd must be a number, not {max_cost_usd!r}") from None
        if isinstance(max_cost_usd, bool) or not cost.is_finite() or cost < 0:
            raise InvalidRequest(f"max_cost_usd must be a number >= 0, not {max_cost_usd!r}")
    return max_tokens, cost


def set_budget(
    connection: Connection,
    *,
    owner: str | None,
    conversation_id: uuid.UUID | None,
    period: str,
    max_tokens: int | None,
    max_cost_usd: float | str | None,
) -> None:
    tokens, cost = checked(owner, conversation_id, period, max_tokens, max_cost_usd)
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
            max_tokens=tokens,
            max_cost_usd=cost,
        )
    )


def remove_budget(
    connection: Connection, *, owner: str | None, conversation_id: uuid.UUID | None, period: str
) -> bool:
    """Whether there was one to remove."""
    if (owner is None) == (conversation_id is None) or period not in PERIODS:
        raise InvalidRequest("give exactly one of owner and conversation, and a period")
    removed = connection.execute(delete(budgets).where(*_subject(owner, conversation_id, period)))
    return bool(removed.rowcount)


def list_budgets(connection: Connection, owner: str | None = None) -> list[BudgetView]:
    query = select(
        budgets.c.owner,
        budgets.c.conversation_id,
        budgets.c.period,
        budgets.c.max_tokens,
        budgets.c.max_cost_usd,
        budgets.c.created_at,
    ).order_by(budgets.c.id)
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


__all__ = ["BudgetView", "checked", "list_budgets", "remove_budget", "set_budget"]
