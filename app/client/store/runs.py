"""The runs across owners, for operators: turns with their conversations, filtered
(`runs.RunFilter`), newest first, a page after the previous one's last turn (keyset: the
`(created_at, id)` of `ix_turns_created` and `ix_turns_status_created`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, func, or_, select, tuple_

from app.client.runs import STUCK, RunFilter, RunView
from app.models.tables import conversations, turns
from app.vocabulary import RUNNING


def list_runs(connection: Connection, wanted: RunFilter, now: datetime) -> list[RunView]:
    model = func.coalesce(turns.c.model, conversations.c.model)
    query = (
        select(
            turns.c.id,
            turns.c.conversation_id,
            conversations.c.owner,
            turns.c.number,
            turns.c.status,
            model.label("model"),
            turns.c.error,
            turns.c.cost_usd,
            turns.c.created_at,
            turns.c.started_at,
            turns.c.finished_at,
            conversations.c.iterations,
            conversations.c.lease_owner,
            conversations.c.heartbeat_at,
            conversations.c.turn_number,
        )
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .order_by(turns.c.created_at.desc(), turns.c.id.desc())
        .limit(wanted.limit)
    )
    if wanted.status == STUCK:
        silent = now - timedelta(seconds=wanted.stuck_seconds)
        query = query.where(
            turns.c.status == RUNNING,
            or_(conversations.c.heartbeat_at.is_(None), conversations.c.heartbeat_at < silent),
        )
    elif wanted.status is not None:
        query = query.where(turns.c.status == wanted.status)
    if wanted.owner is not None:
        query = query.where(conversations.c.owner == wanted.owner)
    if wanted.model is not None:
        query = query.where(model == wanted.model)
    if wanted.since is not None:
        query = query.where(turns.c.created_at >= wanted.since)
    if wanted.until is not None:
        query = query.where(turns.c.created_at < wanted.until)
    if wanted.cost_above is not None:
        query = query.where(turns.c.cost_usd > wanted.cost_above)
    if wanted.before is not None:
        mark = select(turns.c.created_at).where(turns.c.id == wanted.before).scalar_subquery()
        query = query.where(tuple_(turns.c.created_at, turns.c.id) < tuple_(mark, wanted.before))
    return [_view(row, now) for row in connection.execute(query)]


def _view(row: Any, now: datetime) -> RunView:
    latest = row.number == row.turn_number
    current = row.status == RUNNING and latest
    beat = _aware(row.heartbeat_at) if current and row.heartbeat_at is not None else None
    return RunView(
        row.id,
        row.conversation_id,
        row.owner,
        row.number,
        row.status,
        row.model,
        row.error,
        Decimal(row.cost_usd or 0),
        _aware(row.created_at),
        None if row.started_at is None else _aware(row.started_at),
        None if row.finished_at is None else _aware(row.finished_at),
        row.iterations if current else 0,
        row.lease_owner if current else None,
        None if beat is None else max(0.0, (now - beat).total_seconds()),
        latest,
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = ["list_runs"]
