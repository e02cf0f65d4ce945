"""Budgets' spend, read by both sides: what an owner or one conversation has spent, and whether a
budget (`models.Budget`) is used up.

The worker asks before each model call (a crash never resets what is committed), the web side
before it accepts a message (429 `budget_exceeded` at the API). Spend is the sum over the turns
of the subject (its conversations, for an owner), per UTC day by the day the turn was submitted,
or in total; a call whose price is unknown adds its tokens but no money (its cost is unknown).
A budget is used up once the spend reaches it; the operator sets them through the web side
(`app/client/store/budgets.py`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import Connection, Select, func, or_, select

from app.models import DAY
from app.models.tables import budgets, conversations, turns


class Limit(NamedTuple):
    owner: str | None
    conversation_id: uuid.UUID | None
    period: str
    max_tokens: int | None
    max_cost_usd: Decimal | None


class Spend(NamedTuple):
    tokens: int
    cost_usd: Decimal


def used_up(limit: Limit, spend: Spend) -> str | None:
    """**Pure**: the error naming the budget when `spend` has reached it, else None."""
    who = f"owner {limit.owner!r}" if limit.owner is not None else "this conversation"
    when = "today (UTC)" if limit.period == DAY else "in total"
    if limit.max_tokens is not None and spend.tokens >= limit.max_tokens:
        return (
            f"Budget exceeded: {who} used {spend.tokens:,} tokens {when}; its "
            f"{'daily' if limit.period == DAY else 'total'} token budget is {limit.max_tokens:,}"
        )
    if limit.max_cost_usd is not None and spend.cost_usd >= limit.max_cost_usd:
        return (
            f"Budget exceeded: {who} spent ${spend.cost_usd:.4f} {when}; its "
            f"{'daily' if limit.period == DAY else 'total'} budget is ${limit.max_cost_usd:.4f}"
        )
    return None


def limits() -> Select[Any]:
    """The one SELECT of budget rows: `applying`, and the web side's list."""
    return select(
        budgets.c.owner,
        budgets.c.conversation_id,
        budgets.c.period,
        budgets.c.max_tokens,
        budgets.c.max_cost_usd,
        budgets.c.created_at,
    ).order_by(budgets.c.id)


def applying(connection: Connection, conversation_id: uuid.UUID) -> list[Limit]:
    """The budgets of the conversation and of its owner."""
    owner = select(conversations.c.owner).where(conversations.c.id == conversation_id)
    query = limits().where(
        or_(
            budgets.c.conversation_id == conversation_id,
            budgets.c.owner == owner.scalar_subquery(),
        )
    )
    return [Limit(*row[:5]) for row in connection.execute(query)]


def spend(connection: Connection, limit: Limit, now: datetime | None = None) -> Spend:
    """What the budget's subject has spent in its period, from the committed turn totals."""
    query: Any = select(
        _sum(turns.c.prompt_tokens + turns.c.completion_tokens),
        _sum(turns.c.cost_usd),
    )
    if limit.conversation_id is not None:
        query = query.where(turns.c.conversation_id == limit.conversation_id)
    else:
        query = query.join(conversations, conversations.c.id == turns.c.conversation_id).where(
            conversations.c.owner == limit.owner
        )
    if limit.period == DAY:
        today = (now or datetime.now(UTC)).replace(hour=0, minute=0, second=0, microsecond=0)
        query = query.where(turns.c.created_at >= today)
    tokens, cost = connection.execute(query).one()
    return Spend(int(tokens), Decimal(str(cost)))


def check(
    connection: Connection, conversation_id: uuid.UUID, now: datetime | None = None
) -> str | None:
    """The first used-up budget of the conversation or its owner, as an error; None if none."""
    for limit in applying(connection, conversation_id):
        found = used_up(limit, spend(connection, limit, now))
        if found is not None:
            return found
    return None


def _sum(column: Any) -> Any:
    """A sum that is 0 over no rows."""
    return func.coalesce(func.sum(column), 0)


__all__ = ["Limit", "Spend", "applying", "check", "limits", "spend", "used_up"]
