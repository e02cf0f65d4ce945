"""The worker's webhook SQL: take the deliveries that are due, record how each attempt went.

A delivery is taken by moving its `next_attempt_at` past the attempt (`lease` seconds) and
counting the attempt, in one statement that skips rows another worker is taking (PostgreSQL:
`FOR UPDATE SKIP LOCKED`; SQLite has one writer). A worker that dies while sending leaves the
row to be taken again when that time passes: at least once. The outcome is written only while
the row is still this attempt's (same `attempts`, still pending), so a worker that took too long
never overwrites the attempt of the worker that took the row after it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, func, select, update

from app.models import ACTION_REQUIRED, DELIVERED, GAVE_UP, PENDING, STANDARD_BODY
from app.models.tables import conversations, deliveries, events, webhooks
from app.worker.store.clock import Clock, utc_now


@dataclass(frozen=True)
class DueDelivery:
    id: int
    attempts: int  # counting this one
    webhook_id: uuid.UUID
    url: str
    secret: str
    type: str
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    event_seq: int
    error: str | None
    occurred_at: datetime
    body_format: str = STANDARD_BODY  # the webhook's: ours, or OpenAI's events
    pauses: int = 0  # the turn's pauses before the event (which of its responses it ends)
    owner: str | None = None  # whose: the webhook's owner, or its conversation's


class DeliveryStore:
    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock

    def take_due(self, limit: int, lease: float) -> list[DueDelivery]:
        """Up to `limit` due deliveries, each now this worker's for `lease` seconds."""
        now = self.clock()
        due = (
            select(deliveries.c.id)
            .where(deliveries.c.status == PENDING, deliveries.c.next_attempt_at <= now)
            .order_by(deliveries.c.next_attempt_at)
            .limit(limit)
        )
        if self.engine.dialect.name == "postgresql":
            due = due.with_for_update(skip_locked=True)
        with self.engine.begin() as connection:
            taken = connection.execute(
                update(deliveries)
                .where(deliveries.c.id.in_(due.scalar_subquery()))
                .values(
                    next_attempt_at=now + timedelta(seconds=lease),
                    last_attempt_at=now,
                    attempts=deliveries.c.attempts + 1,
                )
                .returning(deliveries.c.id)
            ).all()
            if not taken:
                return []
            pauses = (
                select(func.count())
                .where(
                    events.c.conversation_id == deliveries.c.conversation_id,
                    events.c.turn_id == deliveries.c.turn_id,
                    events.c.type == ACTION_REQUIRED,
                    events.c.seq < deliveries.c.event_seq,
                )
                .scalar_subquery()
                .label("pauses")
            )
            rows = connection.execute(
                select(
                    deliveries,
                    webhooks.c.url,
                    webhooks.c.secret,
                    webhooks.c.body_format,
                    pauses,
                    func.coalesce(webhooks.c.owner, conversations.c.owner).label("owner"),
                )
                .join(webhooks, webhooks.c.id == deliveries.c.webhook_id)
                .outerjoin(conversations, conversations.c.id == deliveries.c.conversation_id)
                .where(deliveries.c.id.in_([row.id for row in taken]))
                .order_by(deliveries.c.id)
            ).all()
        return [
            DueDelivery(
                id=row.id,
                attempts=row.attempts,
                webhook_id=row.webhook_id,
                url=row.url,
                secret=row.secret,
                type=row.type,
                conversation_id=row.conversation_id,
                turn_id=row.turn_id,
                event_seq=row.event_seq,
                error=row.error,
                occurred_at=row.occurred_at,
                body_format=row.body_format,
                pauses=row.pauses,
                owner=row.owner,
            )
            for row in rows
        ]

    def release(self, delivery: DueDelivery, after: float) -> bool:
        """Give a taken delivery back unsent (its attempt not counted), due in `after` s."""
        with self.engine.begin() as connection:
            result = connection.execute(
                update(deliveries)
                .where(
                    deliveries.c.id == delivery.id,
                    deliveries.c.status == PENDING,
                    deliveries.c.attempts == delivery.attempts,
                )
                .values(
                    attempts=deliveries.c.attempts - 1,
                    next_attempt_at=self.clock() + timedelta(seconds=after),
                )
            )
            return result.rowcount == 1

    def delivered(self, delivery: DueDelivery, status_code: int) -> bool:
        now = self.clock()
        return self._record(
            delivery,
            status=DELIVERED,
            delivered_at=now,
            last_status_code=status_code,
            last_error=None,
        )

    def failed(
        self,
        delivery: DueDelivery,
        *,
        status_code: int | None,
        error: str,
        retry_in: float | None,
    ) -> bool:
        """Another attempt in `retry_in` seconds, or (None) give the delivery up."""
        values: dict[str, object] = {"last_status_code": status_code, "last_error": error}
        if retry_in is None:
            values["status"] = GAVE_UP
        else:
            values["next_attempt_at"] = self.clock() + timedelta(seconds=retry_in)
        return self._record(delivery, **values)

    def _record(self, delivery: DueDelivery, **values: object) -> bool:
        """Whether the row was still this attempt's."""
        with self.engine.begin() as connection:
            result = connection.execute(
                update(deliveries)
                .where(
                    deliveries.c.id == delivery.id,
                    deliveries.c.attempts == delivery.attempts,
                    deliveries.c.status == PENDING,
                )
                .values(**values)
            )
        return bool(result.rowcount)


__all__ = ["DeliveryStore", "DueDelivery"]
