"""Webhooks: the outbox written with each terminal event (by the database, whoever appends it),
delivered by the worker's dispatcher to a real HTTP receiver that verifies the Standard Webhooks
signature, retried with the schedule's waits through failures and timeouts, given up after the
last one and listed with its error, sent again on request. On PostgreSQL and SQLite, with
in-process model and tools; a worker killed mid-delivery is in `tests/crash/test_webhooks.py`,
the HTTP routes in `tests/api/test_webhooks_api.py`.

What each bad call gets (`InvalidRequest`, nothing written):

| call                                                        | refusal                      |
|-------------------------------------------------------------|------------------------------|
| url not http(s), no host, with user:password, a #fragment   | "url must ..."               |
| url over 2,000 characters, or not text                      | "url is over" / "url must"   |
| event_types empty, a string, or naming an unknown type      | "event_types" / "unknown"    |
| description over 500 characters                             | "description must be text"   |
| a conversation that is not there, or another owner's        | `ConversationNotFound`       |
| a webhook id that is not a UUID, unknown, another owner's   | `WebhookNotFound`            |
| deliveries with an unknown status, or a limit outside 1-200 | "status" / "limit must be"   |
| redeliver an unknown delivery, or a non-numeric id          | `WebhookNotFound`            |
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import openai
import psycopg
import pytest
from sqlalchemy import select

from app.config import load_settings
from app.errors import ConversationNotFound, InvalidRequest, WebhookNotFound
from app.models import Webhook, WebhookDelivery, message_id
from app.testing import fakes
from app.testing.services import libpq_dsn
from app.worker.janitor import clean_up
from app.worker.lease_runner import Outcome
from app.worker.store import DeliveryStore
from app.worker.threads import DatabaseThreads
from app.worker.webhook_dispatcher import WebhookDispatcher
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of
from tests.invariants import outbox_violations
from tests.servers.webhook_receiver import Receiver, receiving
from tests.worker_process import REPO

# (a deadline a loaded CI machine meets: 0.5 s was missed by one of two concurrent
# deliveries once, and the test saw one; the timeout's own test sets its short one)
FAST = {"webhook_retry_schedule": "0,0", "webhook_timeout_seconds": 5.0}


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


def answered(text: str = "It is 3.") -> fakes.ScriptedModel:
    return fakes.ScriptedModel(fakes.by_iteration([fakes.text(text)]))


def deliver(world: World, **settings: Any) -> int:
    """One round of a worker's dispatcher: what was due, sent and recorded."""
    options = {**FAST, **settings}
    dispatcher = WebhookDispatcher(
        load_settings(database_url=str(world.engine.url), **options),
        DeliveryStore(world.engine),
        DatabaseThreads(2),
    )

    async def once() -> int:
        try:
            return await dispatcher.deliver_due(wait=True)
        finally:
            await dispatcher.close()

    return asyncio.run(once())


def outbox(world: World) -> list[Any]:
    with world.engine.connect() as connection:
        table = WebhookDelivery.__table__
        return connection.execute(select(table).order_by(table.c.id)).all()  # type: ignore[attr-defined]


def chat(world: World, owner: str | None = "alice", text: str = "Hi") -> uuid.UUID:
    conversation_id = world.client.create_conversation(owner=owner, tools=["add"])
    world.client.submit_message(conversation_id, text)
    return conversation_id


# --- the outbox ---------------------------------------------------------------------------------


def test_a_completed_turn_writes_one_delivery_per_webhook_that_wants_it(world: World) -> None:
    mine = world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
    only_failures = world.client.admin.add_webhook(
        "https://alice.example/failures", owner="alice", event_types=["turn.failed"]
    )
    world.client.admin.add_webhook("https://bob.example/hooks", owner="bob")
    conversation_id = chat(world)
    assert outbox(world) == []  # nothing until a turn ends
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE

    rows = outbox(world)
    assert [(r.webhook_id, r.type, r.status, r.attempts) for r in rows] == [
        (mine.id, "turn.completed", "pending", 0)
    ]
    turn = world.client.current_turn(conversation_id)
    assert rows[0].turn_id == turn.id and rows[0].conversation_id == conversation_id
    terminal = [
        e for e in world.client.events(conversation_id).events if e.type == "turn.completed"
    ]
    assert rows[0].event_seq == terminal[0].seq
    assert only_failures.event_types == ("turn.failed",)


def test_each_end_of_a_turn_is_told_whoever_writes_it(world: World) -> None:
    """The worker's failure (with its error), a pause, the web side's cancel and the janitor's
    failure: each terminal event has its delivery, written in its own transaction."""
    world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
    failing = fakes.ScriptedModel(
        fakes.by_iteration([fakes.ModelError("LLM call failed (HTTP 400): bad request")])
    )
    failed = chat(world)
    assert run(world.runner(failing), failed) is Outcome.FAILED

    cancelled = chat(world)  # queued, no worker: the web side ends it
    world.client.cancel(cancelled)

    stuck = chat(world)  # queued, and no worker ever comes: the janitor fails it
    report = clean_up(world.upkeep, older_than=0.0)
    assert [c.id for c in report.conversations] == [stuck]

    by_conversation = {r.conversation_id: r for r in outbox(world)}
    assert by_conversation[failed].type == "turn.failed"
    assert "bad request" in (by_conversation[failed].error or "")
    assert by_conversation[cancelled].type == "turn.cancelled"
    assert by_conversation[stuck].type == "turn.failed"
    assert (by_conversation[stuck].error or "").startswith("No progress for more than 0 s")


def test_a_turn_that_waits_for_the_user_is_told_as_requires_action(world: World) -> None:
    conversation_id = world.client.create_conversation(owner="alice", tools=["add"])
    hook = world.client.admin.add_webhook(
        "https://alice.example/hooks", conversation_id=conversation_id, owner="alice"
    )
    assert hook.conversation_id == conversation_id and hook.owner is None
    world.client.submit_message(conversation_id, "Add, but ask me first")
    question = fakes.calls(("q1", "agent_clarify", {"question": "Which numbers?"}))
    asking = fakes.ScriptedModel(fakes.by_iteration([question]))
    assert run(world.runner(asking), conversation_id) is Outcome.REQUIRES_ACTION
    assert [(r.type, r.webhook_id) for r in outbox(world)] == [("turn.requires_action", hook.id)]
    other = chat(world)  # the same owner's other conversation: not this webhook's
    assert run(world.runner(answered()), other) is Outcome.IDLE
    assert len(outbox(world)) == 1


def test_ownerless_conversations_are_told_to_ownerless_webhooks(world: World) -> None:
    ownerless = world.client.admin.add_webhook("https://ops.example/hooks")
    world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
    conversation_id = chat(world, owner=None)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    assert [r.webhook_id for r in outbox(world)] == [ownerless.id]


def test_deliveries_outlive_their_conversation_but_not_their_webhook(world: World) -> None:
    hook = world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    world.client.delete_conversation(conversation_id)
    assert len(outbox(world)) == 1  # still to be sent: the receiver reads a 404 if it asks
    world.client.admin.remove_webhook(hook.id)
    assert outbox(world) == []
    with pytest.raises(WebhookNotFound):
        world.client.admin.get_webhook(hook.id)


# --- delivery -------------------------------------------------------------------------------------


def test_a_delivery_is_signed_by_the_standard_webhooks_scheme(
    world: World, receiver: Receiver
) -> None:
    hook = world.client.admin.add_webhook(receiver.url, owner="alice", description="CRM sync")
    assert hook.secret is not None and hook.secret.startswith("whsec_")
    assert world.client.admin.get_webhook(hook.id).secret is None  # shown once
    receiver.secret = hook.secret
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    assert deliver(world) == 1

    [got] = receiver.received
    assert got.verified
    turn = world.client.current_turn(conversation_id)
    assert got.payload["type"] == "turn.completed"
    assert got.payload["timestamp"].endswith("Z")
    assert got.payload["data"] == {
        "conversation_id": str(conversation_id),
        "turn_id": str(turn.id),
        "status": "completed",
        "error": None,
        "event_seq": outbox(world)[0].event_seq,
    }
    row = outbox(world)[0]
    assert got.id == message_id(hook.id, conversation_id, row.event_seq)
    assert got.headers["content-type"] == "application/json"
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 1, 200)
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.message_id, listed.delivered_at is not None) == (
        "delivered",
        got.id,
        True,
    )
    assert deliver(world) == 0  # nothing twice


def test_an_openai_shaped_webhook_is_verified_by_the_openai_sdk_and_names_the_response(
    world: World, receiver: Receiver
) -> None:
    """For a team on /v1/responses: OpenAI's webhook events, which `client.webhooks.unwrap`
    verifies and types; a pause ends its response `completed`, and the turn's end names the
    response after the answer (`resp_<turn>_1`)."""
    hook = world.client.admin.add_webhook(receiver.url, owner="alice", body_format="openai")
    assert hook.body_format == "openai" and hook.secret is not None
    conversation_id = world.client.create_conversation(
        owner="alice", client_tools=[{"name": "locate", "parameters": {"type": "object"}}]
    )
    world.client.submit_message(conversation_id, "where am I?")
    asks = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "locate", {})), fakes.text("Paris.")])
    )
    assert run(world.runner(asks), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    world.client.answer_actions(turn.id, {"c1": "Paris"})
    assert run(world.runner(asks), conversation_id) is Outcome.IDLE
    assert deliver(world) == 2

    sdk = openai.OpenAI(api_key="unused", webhook_secret=hook.secret, base_url="http://127.0.0.1:9")
    events = [sdk.webhooks.unwrap(got.body, got.headers) for got in receiver.received]
    assert sorted((e.type, e.data.id) for e in events) == [  # (sent concurrently)
        ("response.completed", f"resp_{turn.id.hex}"),
        ("response.completed", f"resp_{turn.id.hex}_1"),
    ]
    assert [e.id for e in events] == [got.headers["webhook-id"] for got in receiver.received]
    tampered = receiver.received[0].body.replace(b"resp_", b"resp_x")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        sdk.webhooks.unwrap(tampered, receiver.received[0].headers)


def test_a_failing_receiver_gets_the_same_message_again_until_it_accepts(
    world: World, receiver: Receiver
) -> None:
    hook = world.client.admin.add_webhook(receiver.url, owner="alice")
    receiver.secret = hook.secret or ""
    receiver.script = [500, 503]
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE

    assert deliver(world) == 1
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.attempts, listed.last_status_code) == ("pending", 1, 500)
    assert listed.last_error == "HTTP 500"  # our words, never the receiver's
    assert deliver(world) == 1
    assert deliver(world) == 1
    assert [r.answered for r in receiver.received] == [500, 503, 200]
    assert len({r.id for r in receiver.received}) == 1  # one message, three attempts
    assert len({r.body for r in receiver.received}) == 1
    assert all(r.verified for r in receiver.received)
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.attempts, listed.last_error) == ("delivered", 3, None)


def test_a_receiver_that_does_not_answer_in_time_is_tried_again(
    world: World, receiver: Receiver
) -> None:
    hook = world.client.admin.add_webhook(receiver.url, owner="alice")
    receiver.secret = hook.secret or ""
    receiver.script = [2.0]  # silent for 2 s; the timeout is 0.5 s
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    assert deliver(world, webhook_timeout_seconds=0.5) == 1
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert (listed.status, listed.last_error) == ("pending", "no answer within 0.5 s")
    assert deliver(world) == 1
    assert world.client.admin.list_deliveries(hook.id)[0].status == "delivered"


def test_waits_grow_by_the_schedule_then_the_delivery_is_given_up_and_listed(
    world: World, receiver: Receiver
) -> None:
    hook = world.client.admin.add_webhook(receiver.url, owner="alice")
    receiver.script = [500] * 3
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    schedule = {"webhook_retry_schedule": "0,3600"}

    assert deliver(world, **schedule) == 1  # attempt 1 fails: the next in 0 s
    assert deliver(world, **schedule) == 1  # attempt 2 fails: the next in an hour
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert listed.next_attempt_at is not None and listed.last_attempt_at is not None
    wait = listed.next_attempt_at - listed.last_attempt_at
    assert timedelta(minutes=59) < wait <= timedelta(hours=1, seconds=5)
    assert deliver(world, **schedule) == 0  # not due
    with world.engine.begin() as connection:  # an hour passes
        table = WebhookDelivery.__table__
        connection.execute(table.update().values(next_attempt_at=listed.last_attempt_at))  # type: ignore[attr-defined]
    assert deliver(world, **schedule) == 1  # attempt 3, the schedule's last, fails: given up
    [failed] = world.client.admin.list_deliveries(hook.id, status="failed")
    assert (failed.attempts, failed.last_status_code, failed.next_attempt_at) == (3, 500, None)
    assert failed.last_error == "HTTP 500"
    assert world.client.admin.list_deliveries(hook.id, status="pending") == []
    assert deliver(world, **schedule) == 0

    again = world.client.admin.redeliver(hook.id, failed.id)
    assert (again.status, again.attempts) == ("pending", 0)
    assert deliver(world, **schedule) == 1  # the receiver accepts now
    assert world.client.admin.list_deliveries(hook.id)[0].status == "delivered"
    assert world.client.admin.redeliver(hook.id, failed.id).status == "delivered"  # unchanged
    assert len({r.id for r in receiver.received}) == 1


def test_an_unreachable_receiver_is_an_error_the_delivery_keeps(world: World) -> None:
    hook = world.client.admin.add_webhook("http://127.0.0.1:9/nothing-listens", owner="alice")
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    # (refused at once; the wait is only long enough that a loaded machine never gets there)
    assert deliver(world, webhook_timeout_seconds=10) == 1
    [listed] = world.client.admin.list_deliveries(hook.id)
    assert listed.status == "pending" and listed.last_status_code is None
    assert listed.last_error == "could not connect"


def test_a_redirect_is_not_followed(world: World, receiver: Receiver) -> None:
    hook = world.client.admin.add_webhook(receiver.url, owner="alice")
    receiver.script = [307]
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    deliver(world)
    assert world.client.admin.list_deliveries(hook.id)[0].last_status_code == 307
    assert len(receiver.received) == 1


def test_a_taken_delivery_is_no_one_else_s_until_its_lease_ends(world: World) -> None:
    world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
    conversation_id = chat(world)
    assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
    first, second = DeliveryStore(world.engine), DeliveryStore(world.engine)
    [taken] = first.take_due(10, lease=60)
    assert taken.attempts == 1
    assert second.take_due(10, lease=60) == []
    # The lease ends (the first worker died, or is slow): another takes it, and the late
    # first worker's outcome is not recorded over the second's attempt.
    with world.engine.begin() as connection:
        table = WebhookDelivery.__table__
        connection.execute(table.update().values(next_attempt_at=taken.occurred_at))  # type: ignore[attr-defined]
    [again] = second.take_due(10, lease=60)
    assert again.attempts == 2 and again.id == taken.id
    assert first.delivered(taken, 200) is False
    assert second.delivered(again, 200) is True
    assert outbox(world)[0].status == "delivered"


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"url": "ftp://example.com/hooks"}, "url must be an http or https URL"),
        ({"url": "https:///no-host"}, "url must be an http or https URL"),
        ({"url": "https://user:pw@example.com/"}, "url must not carry credentials"),
        ({"url": "https://example.com/#frag"}, "url must not have a #fragment"),
        ({"url": "https://example.com:99999/"}, "is not a URL"),
        ({"url": "https://example.com/" + "a" * 2000}, "url is over 2000 characters"),
        ({"url": 42}, "url must be an http or https URL"),
        ({"event_types": []}, "event_types must name at least one"),
        ({"event_types": "turn.completed"}, "event_types must be a list"),
        ({"event_types": ["turn.started"]}, "unknown event type 'turn.started'"),
        ({"description": "x" * 501}, "description must be text"),
    ],
)
def test_each_bad_webhook_is_refused_and_nothing_is_written(
    world: World, options: dict[str, Any], refusal: str
) -> None:
    options = dict(options)
    url = options.pop("url", "https://example.com/hooks")
    with pytest.raises(InvalidRequest, match=refusal):
        world.client.admin.add_webhook(url, owner="alice", **options)
    assert world.client.admin.list_webhooks() == []


def test_other_owners_webhooks_and_conversations_are_not_found(world: World) -> None:
    bobs = world.client.create_conversation(owner="bob")
    with pytest.raises(ConversationNotFound):
        world.client.admin.add_webhook("https://a.example/", owner="alice", conversation_id=bobs)
    with pytest.raises(ConversationNotFound):
        world.client.admin.add_webhook("https://a.example/", conversation_id=uuid.uuid4())
    hook = world.client.admin.add_webhook("https://b.example/", owner="bob")
    convo_hook = world.client.admin.add_webhook("https://b.example/one", conversation_id=bobs)
    assert [h.id for h in world.client.admin.list_webhooks(owner="bob")] == [hook.id, convo_hook.id]
    assert world.client.admin.list_webhooks(owner="alice") == []
    for call in (
        lambda: world.client.admin.get_webhook(hook.id, owner="alice"),
        lambda: world.client.admin.get_webhook(convo_hook.id, owner="alice"),
        lambda: world.client.admin.remove_webhook(hook.id, owner="alice"),
        lambda: world.client.admin.list_deliveries(hook.id, owner="alice"),
        lambda: world.client.admin.redeliver(hook.id, 1, owner="alice"),
        lambda: world.client.admin.get_webhook("not-a-uuid"),
        lambda: world.client.admin.get_webhook(uuid.uuid4()),
        lambda: world.client.admin.redeliver(hook.id, 12345),
        lambda: world.client.admin.redeliver(hook.id, "1"),  # type: ignore[arg-type]
    ):
        with pytest.raises(WebhookNotFound):
            call()
    with pytest.raises(InvalidRequest, match="status must be one of pending, delivered, failed"):
        world.client.admin.list_deliveries(hook.id, status="lost")
    with pytest.raises(InvalidRequest, match="limit must be 1 to 200"):
        world.client.admin.list_deliveries(hook.id, limit=0)
    assert len(world.client.admin.list_webhooks()) == 2  # all still there


def test_the_secret_is_a_standard_webhooks_secret_and_stays_in_the_database(world: World) -> None:
    hook = world.client.admin.add_webhook("https://a.example/", owner="alice")
    with world.engine.connect() as connection:
        table = Webhook.__table__
        stored = connection.execute(select(table.c.secret)).scalar_one()  # type: ignore[attr-defined]
    assert stored == hook.secret
    assert all(h.secret is None for h in world.client.admin.list_webhooks())
    assert "whsec_" not in json.dumps([str(h) for h in world.client.admin.list_webhooks()])


def test_the_invariant_checker_catches_a_missing_or_wrong_delivery(database_url: str) -> None:
    for world in world_of(database_url, make_tools()):
        hook = world.client.admin.add_webhook("https://alice.example/hooks", owner="alice")
        with world.engine.begin() as connection:  # made well before the turn
            connection.execute(
                Webhook.__table__.update().values(
                    created_at=Webhook.created_at - timedelta(hours=1)
                )  # type: ignore[attr-defined]
            )
        conversation_id = chat(world)
        assert run(world.runner(answered()), conversation_id) is Outcome.IDLE
        with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
            assert outbox_violations(conn) == []
            conn.execute("UPDATE webhook_deliveries SET type = 'turn.failed'")
            assert [p for p in outbox_violations(conn) if "names event" in p] != []
            conn.execute("DELETE FROM webhook_deliveries")
            [problem] = outbox_violations(conn)
            assert f"has no delivery to webhook {hook.id}" in problem
            # (put back, so the invariants hold after the test)
            conn.execute(
                "INSERT INTO webhook_deliveries (webhook_id, conversation_id, event_seq, turn_id,"
                " type, occurred_at) SELECT %s, conversation_id, seq, turn_id, type, created_at"
                " FROM events WHERE type = 'turn.completed'",
                (hook.id,),
            )
            assert outbox_violations(conn) == []


def webhooks_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "CHATWORKER_WEBHOOK_ALLOWED_NETWORKS": os.environ["CHATWORKER_WEBHOOK_ALLOWED_NETWORKS"],
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "webhooks", *args],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_webhooks_from_the_command_line(database_url: str, receiver: Receiver) -> None:
    added = webhooks_cli(
        database_url, "add", receiver.url, "--owner", "alice", "--events", "turn.failed"
    )
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert secret.startswith("whsec_") and "shown this once" in added.stderr
    listed = webhooks_cli(database_url, "list")
    assert "owner alice  turn.failed" in listed.stdout and secret not in listed.stdout
    webhook_id = listed.stdout.split()[0]
    assert webhooks_cli(database_url, "deliveries", webhook_id).stdout == ""
    refused = webhooks_cli(database_url, "add", "ftp://x.example/")
    assert refused.returncode != 0 and "url must be an http or https URL" in refused.stderr
    unknown = webhooks_cli(database_url, "remove", str(uuid.uuid4()))
    assert unknown.returncode != 0 and "no webhook" in unknown.stderr
    assert webhooks_cli(database_url, "remove", webhook_id).returncode == 0
    assert webhooks_cli(database_url, "list").stdout == ""
