"""A worker killed while it delivers a webhook: the receiver had the POST and answered 200, the
worker died (SIGKILL, `webhook_sent` failpoint) before recording it. Another worker sends it
again once the dead worker's hold on it ends: delivered, here twice, never lost; the receiver
deduplicates by `webhook-id` and acts once. Real worker processes, PostgreSQL, Redis, the fake
LLM over HTTP, a real receiver.
"""

from __future__ import annotations

import time

from sqlalchemy import select

from app.models import WebhookDelivery
from tests.deployment import Deployment
from tests.invariants import assert_invariants
from tests.servers.webhook_receiver import receiving

HOLD = {"CHATWORKER_WEBHOOK_LEASE_SECONDS": "3", "CHATWORKER_WEBHOOK_TIMEOUT_SECONDS": "2"}


def test_a_delivery_whose_worker_died_after_sending_is_sent_again_and_never_lost(
    deployment: Deployment,
) -> None:
    for receiver in receiving():
        hook = deployment.client.admin.add_webhook(receiver.url)
        receiver.secret = hook.secret or ""
        doomed = deployment.start_worker("doomed", {**HOLD, "CHATWORKER_FAILPOINT": "webhook_sent"})
        conversation_id = deployment.chat("Say hello")
        assert deployment.wait(conversation_id).status == "idle"
        [first] = receiver.wait_for(1)
        assert doomed.wait_exit(30) is not None, doomed.log()
        assert "failpoint webhook_sent reached" in doomed.log()
        with deployment.engine.connect() as connection:
            row = connection.execute(select(WebhookDelivery.__table__)).one()  # type: ignore[attr-defined]
        assert (row.status, row.attempts) == ("pending", 1)  # sent, not recorded

        deployment.start_worker("heir", HOLD)
        deadline = time.monotonic() + 30
        while True:
            with deployment.engine.connect() as connection:
                row = connection.execute(select(WebhookDelivery.__table__)).one()  # type: ignore[attr-defined]
            if row.status == "delivered":
                break
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert row.attempts == 2
        received = receiver.received
        assert len(received) == 2
        assert {r.id for r in received} == {first.id}  # the same message, twice
        assert received[0].body == received[1].body
        assert all(r.verified for r in received)
        assert receiver.seen == {first.id}  # acted on once
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
