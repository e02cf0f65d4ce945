"""The webhook dispatcher: a worker host's chore that sends the outbox's due deliveries.

Every `CHATWORKER_WEBHOOK_POLL_SECONDS` (and at once when a turn ends here) it takes the due
deliveries (`store.DeliveryStore.take_due`), POSTs each, signed by the Standard Webhooks scheme
(`standardwebhooks`: `webhook-id`, `webhook-timestamp`, `webhook-signature`), and records the
outcome; `delivery.after_attempt` decides what comes next. Each POST is sent by
`webhook_sender.post` (the egress policy, one deadline, the answer's body never read). Redirects
are not followed (a moved receiver is a failure, not a reason to send a signed body elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import Webhook as Signer

from app.config import Settings
from app.models import message_id
from app.telemetry import metrics
from app.worker import failpoints
from app.worker.delivery import after_attempt, body
from app.worker.store import DeliveryStore, DueDelivery
from app.worker.threads import DatabaseThreads
from app.worker.webhook_sender import post

log = logging.getLogger(__name__)

BATCH = 50  # deliveries in flight at once
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
    """Sends due deliveries, each as its own task: a slow receiver holds only its own slot (and
    its owner's), never the round (`BATCH` in flight at most, `webhook_owner_concurrency` of
    one owner; an owner's delivery past that is given back until a slot frees)."""

    def __init__(self, settings: Settings, store: DeliveryStore, db: DatabaseThreads) -> None:
        self.settings = settings
        self.store = store
        self.db = db
        self._due = asyncio.Event()
        self._http: httpx.AsyncClient | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._owners: Counter[str | None] = Counter()

    def poke(self) -> None:
        """Look now (a turn ended here: its deliveries are due). Call from the host's loop."""
        self._due.set()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    taken = await self.deliver_due()
                except Exception:  # the database may be down; try again next time
                    log.exception("webhook delivery round failed")
                    taken = 0
                if taken and len(self._in_flight) < BATCH:
                    continue  # more may be due
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._due.wait(), timeout=self.settings.webhook_poll_seconds
                    )
                self._due.clear()
        finally:
            await self.close()

    async def close(self) -> None:
        for task in list(self._in_flight):
            task.cancel()
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def deliver_due(self, wait: bool = False) -> int:
        """Start sending what is due now (as many as there are free slots); how many were
        taken. `wait`: return once they are sent (tests)."""
        free = BATCH - len(self._in_flight)
        if free <= 0:
            return 0
        due = await self.db.run(self.store.take_due, free, self.settings.webhook_lease_seconds)
        started = []
        for delivery in due:
            if self._owners[delivery.owner] >= self.settings.webhook_owner_concurrency:
                # Its owner's slots are taken: back to the outbox, due when one may be free.
                await self.db.run(self.store.release, delivery, self.settings.webhook_poll_seconds)
                continue
            self._owners[delivery.owner] += 1
            task = asyncio.create_task(self._send(delivery))
            self._in_flight.add(task)
            task.add_done_callback(functools.partial(self._done, owner=delivery.owner))
            started.append(task)
        if wait and started:
            await asyncio.gather(*started, return_exceptions=True)
        return len(due)

    def _done(self, task: asyncio.Task[None], *, owner: str | None) -> None:
        self._in_flight.discard(task)
        self._owners[owner] -= 1
        if self._owners[owner] <= 0:
            del self._owners[owner]
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook delivery failed", exc_info=task.exception())
        self._due.set()  # a slot is free: more may be sent

    async def _send(self, delivery: DueDelivery) -> None:
        if self._http is None:
            # No timeouts of its own: `post` sets one deadline for the whole attempt.
            self._http = httpx.AsyncClient(timeout=None, follow_redirects=False, trust_env=False)
        ident = message_id(delivery.webhook_id, delivery.conversation_id, delivery.event_seq)
        payload = body(delivery, ident)
        headers = signed_headers(delivery, payload, datetime.now(UTC))
        started = time.perf_counter()
        attempt = await post(
            self._http,
            delivery.url,
            payload,
            headers,
            deadline=self.settings.webhook_timeout_seconds,
            allowed=self.settings.webhook_networks,
        )
        metrics.WEBHOOK_SECONDS.observe(time.perf_counter() - started)
        status_code = attempt.status_code
        step = after_attempt(
            delivery.attempts,
            status_code,
            self.settings.webhook_retry_schedule,
            permanent=attempt.permanent,
        )
        if step.delivered:
            failpoints.hit("webhook_sent")
            await self.db.run(self.store.delivered, delivery, status_code or 200)
            metrics.WEBHOOK_DELIVERIES.labels("delivered").inc()
            return
        error = attempt.error or "the request failed"
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
