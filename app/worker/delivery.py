"""**Pure**: what a webhook delivery sends and what happens after an attempt.

The body follows the Standard Webhooks payload shape (`type`, `timestamp`, `data`), built only
from the delivery's own fields, which never change: every attempt sends the same bytes under the
same `webhook-id`. `data` names the turn; a receiver that wants more reads it
(`GET /v1/turns/{turn_id}`). A webhook with `body_format` "openai" gets OpenAI's webhook events
instead (`{"id", "object": "event", "created_at", "type": "response.completed", "data": {"id":
"resp_..."}}`), signed the same way, so the openai SDK's `webhooks.unwrap` verifies them.

    attempt outcome                     next
    ----------------------------------  ---------------------------------------------------------
    2xx                                 delivered
    any other status, timeout, refused  again after the schedule's wait for this attempt
    connection, TLS or redirect, an
    address the egress policy refuses
    the same, schedule spent            given up (`failed`), listed by the API with its last error
    an invalid URL                      given up at once (it will never be sent)

The last error is ours ("HTTP 500", "no answer within 10 s", "could not connect"), never the
receiver's words (`webhook_sender.py` reads nothing of an answer but its status).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.vocabulary import (
    OPENAI_BODY,
    WEBHOOK_CANCELLED,
    WEBHOOK_COMPLETED,
    WEBHOOK_FAILED,
    WEBHOOK_REQUIRES_ACTION,
)
from app.worker.store import DueDelivery

TURN_STATUS = {
    WEBHOOK_COMPLETED: "completed",
    WEBHOOK_FAILED: "failed",
    WEBHOOK_CANCELLED: "cancelled",
    WEBHOOK_REQUIRES_ACTION: "requires_action",
}


# OpenAI's webhook event for each of ours: a pause ends its response `completed`, as OpenAI's.
OPENAI_EVENT = {
    WEBHOOK_COMPLETED: "response.completed",
    WEBHOOK_FAILED: "response.failed",
    WEBHOOK_CANCELLED: "response.cancelled",
    WEBHOOK_REQUIRES_ACTION: "response.completed",
}


def body(delivery: DueDelivery, message_id: str = "") -> str:
    """The JSON the receiver gets (the signed string: sent byte for byte): ours, or, for a
    webhook that asked for OpenAI's shape, its event naming the response of `/v1/responses`
    (`resp_<turn>`, `_<n>` after the turn's n-th pause) under the delivery's `webhook-id`."""
    if delivery.body_format == OPENAI_BODY and delivery.turn_id is not None:
        response = f"resp_{delivery.turn_id.hex}"
        if delivery.pauses:
            response += f"_{delivery.pauses}"
        return json.dumps(
            {
                "id": message_id,
                "object": "event",
                "created_at": int(delivery.occurred_at.timestamp()),
                "type": OPENAI_EVENT[delivery.type],
                "data": {"id": response},
            },
            separators=(",", ":"),
        )
    return json.dumps(
        {
            "type": delivery.type,
            "timestamp": _iso(delivery.occurred_at),
            "data": {
                "conversation_id": str(delivery.conversation_id),
                "turn_id": None if delivery.turn_id is None else str(delivery.turn_id),
                "status": TURN_STATUS[delivery.type],
                "error": delivery.error,
                "event_seq": delivery.event_seq,
            },
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Next:
    delivered: bool
    retry_in: float | None = None  # not delivered: the wait before the next attempt; None: give up


def after_attempt(
    attempts: int, status_code: int | None, schedule: Sequence[float], *, permanent: bool = False
) -> Next:
    """`attempts` counts the one that just ended; `status_code` None: no answer at all;
    `permanent`: it can never be sent (an invalid URL), given up at once."""
    if status_code is not None and 200 <= status_code < 300:
        return Next(delivered=True)
    if attempts - 1 < len(schedule) and not permanent:
        return Next(delivered=False, retry_in=schedule[attempts - 1])
    return Next(delivered=False)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:  # SQLite keeps no zone: the store's times are UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


__all__ = ["TURN_STATUS", "Next", "after_attempt", "body"]
