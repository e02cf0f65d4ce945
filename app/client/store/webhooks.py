"""Webhooks' rows, from the web side: add one (its signing secret shown once), list them, remove
one, list a webhook's deliveries (what was sent, what failed and why), send a failed one again.

Each bad value is an `InvalidRequest` naming it (`checks`), and writes nothing. With an `owner`,
only that owner's webhooks (and its conversations') are seen: another owner's are
`WebhookNotFound`. The outbox itself is written by the database (the trigger of migration 0014)
and delivered by the workers (`app/worker/webhooks.py`).
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Row, Select, delete, insert, select, update

from app.client.checks import MAX_DESCRIPTION_CHARS, check_event_types, check_url
from app.client.views import DeliveryView, WebhookView
from app.egress import Network
from app.errors import ConversationNotFound, InvalidRequest, WebhookNotFound
from app.models import (
    BODY_FORMATS,
    DELIVERY_STATUSES,
    GAVE_UP,
    PENDING,
    STANDARD_BODY,
    message_id,
)
from app.models.tables import conversations, deliveries, webhooks

MAX_DELIVERIES_PAGE = 200


def new_secret() -> str:
    """A Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def add_webhook(
    connection: Connection,
    *,
    url: str,
    owner: str | None,
    conversation_id: uuid.UUID | None,
    event_types: Sequence[str] | None,
    description: str | None,
    body_format: str = STANDARD_BODY,
    allowed: Sequence[Network] = (),
) -> WebhookView:
    """A new webhook with a new secret. With `conversation_id`, it hears of that conversation
    only (it must be the owner's); else of every conversation of the owner."""
    checked_url = check_url(url, allowed)
    if body_format not in BODY_FORMATS:
        raise InvalidRequest(f"body_format must be one of {', '.join(BODY_FORMATS)}")
    types = check_event_types(event_types)
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS
    ):
        raise InvalidRequest(f"description must be text of at most {MAX_DESCRIPTION_CHARS} chars")
    if conversation_id is not None:
        query = select(conversations.c.owner).where(conversations.c.id == conversation_id)
        found = connection.execute(query).first()
        if found is None or (owner is not None and found.owner != owner):
            raise ConversationNotFound(f"no conversation {conversation_id}")
    webhook_id = uuid.uuid4()
    secret = new_secret()
    connection.execute(
        insert(webhooks).values(
            id=webhook_id,
            owner=owner if conversation_id is None else None,
            conversation_id=conversation_id,
            url=checked_url,
            secret=secret,
            event_types=" " + " ".join(types) + " ",
            description=description,
            body_format=body_format,
            created_at=datetime.now(UTC),  # (SQLite's own clock counts whole seconds)
        )
    )
    view = get_webhook(connection, webhook_id, owner=None)
    return WebhookView(**{**view.__dict__, "secret": secret})


def list_webhooks(connection: Connection, owner: str | None = None) -> list[WebhookView]:
    query = _visible(select(*_COLUMNS), owner).order_by(webhooks.c.created_at, webhooks.c.id)
    return [_view(row) for row in connection.execute(query)]


def get_webhook(connection: Connection, webhook_id: uuid.UUID, *, owner: str | None) -> WebhookView:
    query = _visible(select(*_COLUMNS), owner).where(webhooks.c.id == webhook_id)
    row = connection.execute(query).first()
    if row is None:
        raise WebhookNotFound(f"no webhook {webhook_id}")
    return _view(row)


def remove_webhook(connection: Connection, webhook_id: uuid.UUID, *, owner: str | None) -> None:
    """The webhook and its deliveries, pending ones included (nothing more is sent)."""
    get_webhook(connection, webhook_id, owner=owner)
    connection.execute(delete(webhooks).where(webhooks.c.id == webhook_id))


def list_deliveries(
    connection: Connection,
    webhook_id: uuid.UUID,
    *,
    owner: str | None,
    status: str | None = None,
    limit: int = 50,
) -> list[DeliveryView]:
    """The webhook's deliveries, newest first; `status` keeps one kind (`failed`: the ones it
    gave up on)."""
    get_webhook(connection, webhook_id, owner=owner)
    if status is not None and status not in DELIVERY_STATUSES:
        raise InvalidRequest(
            f"status must be one of {', '.join(DELIVERY_STATUSES)}, not {status!r}"
        )
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_DELIVERIES_PAGE
    ):
        raise InvalidRequest(f"limit must be 1 to {MAX_DELIVERIES_PAGE}, not {limit!r}")
    query = select(deliveries).where(deliveries.c.webhook_id == webhook_id)
    if status is not None:
        query = query.where(deliveries.c.status == status)
    rows = connection.execute(query.order_by(deliveries.c.id.desc()).limit(limit))
    return [_delivery(row) for row in rows]


def redeliver(
    connection: Connection, webhook_id: uuid.UUID, delivery_id: int, *, owner: str | None
) -> DeliveryView:
    """A delivery the workers gave up on, pending again from now with a fresh schedule (a
    pending or delivered one comes back unchanged)."""
    get_webhook(connection, webhook_id, owner=owner)
    mine = (deliveries.c.id == delivery_id) & (deliveries.c.webhook_id == webhook_id)
    connection.execute(
        update(deliveries)
        .where(mine, deliveries.c.status == GAVE_UP)
        .values(status=PENDING, attempts=0, next_attempt_at=datetime.now(UTC))
    )
    row = connection.execute(select(deliveries).where(mine)).first()
    if row is None:
        raise WebhookNotFound(f"webhook {webhook_id} has no delivery {delivery_id}")
    return _delivery(row)


_COLUMNS = (
    webhooks.c.id,
    webhooks.c.owner,
    webhooks.c.conversation_id,
    webhooks.c.url,
    webhooks.c.event_types,
    webhooks.c.description,
    webhooks.c.created_at,
    webhooks.c.body_format,
)


def _visible(query: Select[Any], owner: str | None) -> Select[Any]:
    if owner is None:
        return query
    owned = select(conversations.c.id).where(conversations.c.owner == owner)
    return query.where(
        (webhooks.c.owner == owner) | webhooks.c.conversation_id.in_(owned.scalar_subquery())
    )


def _view(row: Row[Any]) -> WebhookView:
    return WebhookView(
        id=row.id,
        owner=row.owner,
        conversation_id=row.conversation_id,
        url=row.url,
        event_types=tuple(row.event_types.split()),
        description=row.description,
        created_at=row.created_at,
        body_format=row.body_format,
    )


def _delivery(row: Row[Any]) -> DeliveryView:
    return DeliveryView(
        id=row.id,
        webhook_id=row.webhook_id,
        message_id=message_id(row.webhook_id, row.conversation_id, row.event_seq),
        type=row.type,
        conversation_id=row.conversation_id,
        turn_id=row.turn_id,
        event_seq=row.event_seq,
        status=row.status,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at if row.status == PENDING else None,
        last_attempt_at=row.last_attempt_at,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
        created_at=row.created_at,
    )


__all__ = [
    "add_webhook",
    "get_webhook",
    "list_deliveries",
    "list_webhooks",
    "new_secret",
    "redeliver",
    "remove_webhook",
]
