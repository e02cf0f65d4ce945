"""The audit log's rows: an operator's action recorded in the action's own transaction, and the
log read back, newest first."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Connection, insert, select

from app.client.audit import AuditAction
from app.client.views import AuditView
from app.models.tables import audit_log


def record(connection: Connection, action: AuditAction, selected: int) -> None:
    """`action`, which acted on `selected` runs, in the caller's transaction."""
    connection.execute(
        insert(audit_log).values(
            at=datetime.now(UTC),
            operator=action.operator,
            action=action.action,
            target=action.target,
            selected=selected,
            detail=action.detail or None,
        )
    )


def read_log(connection: Connection, limit: int, before: int | None) -> list[AuditView]:
    """The newest `limit` entries (those older than entry `before`, the previous page's last)."""
    query = select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
    if before is not None:
        query = query.where(audit_log.c.id < before)
    return [
        AuditView(
            row.id,
            row.at if row.at.tzinfo else row.at.replace(tzinfo=UTC),
            row.operator,
            row.action,
            row.target,
            row.selected,
            dict(row.detail or {}),
        )
        for row in connection.execute(query)
    ]


__all__ = ["read_log", "record"]
