"""The webhook dispatcher: a worker host's chore that sends the outbox's due deliveries.

Every `CHATWORKER_WEBHOOK_POLL_SECONDS` (and at once when a turn ends here) it takes the due
deliveries (`store.DeliveryStore.take_due`), POSTs each, signed by the Standard Webhooks scheme
(`standardwebhooks`: `webhook-id`, `webhook-timestamp`, `webhook-signature`), and records the
outcome; `delivery.after_attempt` decides what comes next. Redirects are not followed (a moved
receiver is a failure, not a reason to send a signed body elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import Webhook as Signer

from app.config import Settings
from app.models import message_id
from app.telemetry import metrics
from app.worker import failpoints
from app.worker.delivery import after_attempt, body, describe
from app.worker.store import DeliveryStore, DueDelivery
from app.worker.threads import DatabaseThreads

log = logging.getLogger(__name__)

BATCH = 50  # deliveries taken at once (and sent concurrently)
USER_AGENT = "chatworker-webhooks/1"


def signed_headers(delivery: DueDelivery, payload: str, now: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (the timestamp is the attempt's)."""
    ident = message_id(delivery.webhook_id, delivery.conversation_id, delivery.event_seq)
    return {
        "webhook-id": ident,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Signer(delivery.secret).sign(ident, now, payload),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


class WebhookDispatcher:
    def __init__(self, settings: Settings, store: DeliveryStore, db: DatabaseThreads) -> None:
        self.settings = settings
        self.store = store
        self.db = db
        self._due = asyncio.Event()
        self._http: httpx.AsyncClient | None = None

    def poke(self) -> None:
        """Look now (a turn ended here: its deliveries are due). Call from the host's loop."""
        self._due.set()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    sent = await self.deliver_due()
                except Exception:  # the database may be down; try again next time
                    log.exception("webhook delivery round failed")
                    sent = 0
                if sent >= BATCH:
                    continue  # more may be due
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._due.wait(), timeout=self.settings.webhook_poll_seconds
                    )
                self._due.clear()
        finally:
            await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def deliver_due(self) -> int:
        """Send what is due now; how many were taken."""
        due = await self.db.run(self.store.take_due, BATCH, self.settings.webhook_lease_seconds)
        if due:
            await asyncio.gather(*(self._send(delivery) for delivery in due))
        return len(due)

    async def _send(self, delivery: DueDelivery) -> None:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=self.settings.webhook_timeout_seconds, follow_redirects=False
            )
        ident = message_id(delivery.webhook_id, delivery.conversation_id, delivery.event_seq)
        payload = body(delivery, ident)
        headers = signed_headers(delivery, payload, datetime.now(UTC))
        started = time.perf_counter()
        status_code: int | None = None
        try:
            response = await self._http.post(delivery.url, content=payload, headers=headers)
            status_code = response.status_code
            error = describe(status_code, response.text)
        except httpx.TimeoutException:
            error = f"no answer within {self.settings.webhook_timeout_seconds:g} s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        metrics.WEBHOOK_SECONDS.observe(time.perf_counter() - started)
        step = after_attempt(delivery.attempts, status_code, self.settings.webhook_retry_schedule)
        if step.delivered:
            failpoints.hit("webhook_sent")
            await self.db.run(self.store.delivered, delivery, status_code or 200)
            metrics.WEBHOOK_DELIVERIES.labels("delivered").inc()
            return
        await self.db.run(
            self.store.failed,
            delivery,
            status_code=status_code,
            error=error,
            retry_in=step.retry_in,
        )
        outcome = "retry" if step.retry_in is not None else "failed"
        metrics.WEBHOOK_DELIVERIES.labels(outcome).inc()
        log.warning(
            "webhook %s delivery %d (%s) attempt %d: %s; %s",
            delivery.webhook_id,
            delivery.id,
            delivery.type,
            delivery.attempts,
            error,
            f"next in {step.retry_in:g} s" if step.retry_in is not None else "given up",
        )


__all__ = ["BATCH", "USER_AGENT", "WebhookDispatcher", "signed_headers"]
