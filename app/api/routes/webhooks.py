"""Webhooks: add one (its secret is in this answer only), list, read, remove; a webhook's
deliveries (what failed and why) and sending a given-up one again. Each caller sees its own."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from app.api.auth import Authenticated
from app.api.bodies import WebhookCreate
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.schemas import DeliveryList, DeliveryOut, WebhookList, WebhookOut
from app.api.state import Api

router = APIRouter(prefix="/webhooks", tags=["webhooks"], route_class=GuardedRoute)


@router.post(
    "", response_model=WebhookOut, status_code=201, responses=documented(400, 401, 404, 422, 503)
)
async def add_webhook(body: WebhookCreate, caller: Authenticated, api: Api) -> WebhookOut:
    """Be told when a turn of yours ends (`turn.completed`, `turn.failed`, `turn.cancelled`)
    or waits for you (`turn.requires_action`): a POST to `url`, at least once, signed by the
    Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`, `webhook-signature`) with the
    `secret` of this answer. Body: `{"type", "timestamp", "data": {"conversation_id",
    "turn_id", "status", "error", "event_seq"}}`. A receiver answers 2xx within the timeout, or
    it is tried again with growing waits for about a day; deduplicate by `webhook-id`."""
    view = await api.chat.admin.add_webhook(
        body.url,
        owner=caller.owner,
        conversation_id=body.conversation_id,
        event_types=body.event_types,
        description=body.description,
        body_format=body.body_format,
    )
    return WebhookOut.model_validate(view)


@router.get("", response_model=WebhookList, responses=documented(401, 503))
async def list_webhooks(caller: Authenticated, api: Api) -> WebhookList:
    """Your webhooks (never their secrets)."""
    return WebhookList(
        data=[
            WebhookOut.model_validate(view)
            for view in await api.chat.admin.list_webhooks(owner=caller.owner)
        ]
    )


@router.get("/{webhook_id}", response_model=WebhookOut, responses=documented(401, 404, 422, 503))
async def get_webhook(webhook_id: uuid.UUID, caller: Authenticated, api: Api) -> WebhookOut:
    view = await api.chat.admin.get_webhook(webhook_id, owner=caller.owner)
    return WebhookOut.model_validate(view)


@router.delete("/{webhook_id}", status_code=204, responses=documented(401, 404, 422, 503))
async def remove_webhook(webhook_id: uuid.UUID, caller: Authenticated, api: Api) -> Response:
    """The webhook and its deliveries, pending ones included: nothing more is sent."""
    await api.chat.admin.remove_webhook(webhook_id, owner=caller.owner)
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryList,
    responses=documented(400, 401, 404, 422, 503),
)
async def list_deliveries(
    webhook_id: uuid.UUID,
    caller: Authenticated,
    api: Api,
    status: Annotated[Literal["pending", "delivered", "failed"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> DeliveryList:
    """The webhook's deliveries, newest first: each attempt's count, the receiver's last
    status and error; `status=failed` lists the ones given up."""
    views = await api.chat.admin.list_deliveries(
        webhook_id, owner=caller.owner, status=status, limit=limit
    )
    return DeliveryList(data=[DeliveryOut.model_validate(view) for view in views])


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    response_model=DeliveryOut,
    responses=documented(401, 404, 422, 503),
)
async def redeliver(
    webhook_id: uuid.UUID,
    delivery_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    caller: Authenticated,
    api: Api,
) -> DeliveryOut:
    """Send a given-up delivery again from now, with a fresh schedule (a pending or delivered
    one comes back unchanged)."""
    return DeliveryOut.model_validate(
        await api.chat.admin.redeliver(webhook_id, delivery_id, owner=caller.owner)
    )
