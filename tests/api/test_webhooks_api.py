"""Webhooks over HTTP, end to end: an owner adds a webhook with its API key, a turn runs in the
worker process, and the worker's dispatcher POSTs the signed delivery to a real receiver, which
verifies it with the Standard Webhooks library; the deliveries are listed with the receiver's
answers, a failed one is sent again on request; each owner sees its own.

What each bad request gets:

| request                                                   | answer                              |
|-----------------------------------------------------------|-------------------------------------|
| url not http(s), with credentials or a fragment           | 400 invalid_request                 |
| an unknown event type, an empty list, an unknown field    | 422 validation_failed               |
| a conversation that is not there, or another owner's      | 404 conversation_not_found          |
| a webhook that is not there, or another owner's           | 404 webhook_not_found               |
| a delivery id that is not there                           | 404 webhook_not_found               |
| deliveries with an unknown status or a limit of 0         | 422 validation_failed               |
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from app.testing.fake_llm import FakeLLMServer
from bench.workers import dramatiq_child, rss_mb
from tests.api.conftest import Deployment, assert_problem, finished_turn, owner_name
from tests.servers.hostile_receiver import HostileReceiver
from tests.servers.webhook_receiver import Receiver, receiving

pytestmark = pytest.mark.xdist_group("api-webhooks")

# Failed attempts come again at once, twice; then the delivery is given up.
API_ENV = {"CHATWORKER_WEBHOOK_RETRY_SCHEDULE": "0,0", "CHATWORKER_WEBHOOK_POLL_SECONDS": "0.2"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


@pytest.fixture
def http(shared_api: Deployment) -> Iterator[httpx.Client]:
    with shared_api.http(token=shared_api.key(owner_name("hooks"))) as client:
        yield client


def chat(http: httpx.Client, fake_llm: FakeLLMServer, answer: str = "Done.") -> tuple[str, str]:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": answer}], match=token)
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    submitted = http.post(f"/v1/conversations/{conversation}/messages", json={"text": token})
    assert submitted.status_code == 202, submitted.text
    return conversation, submitted.json()["turn"]["id"]


def deliveries(http: httpx.Client, webhook: str, **params: str) -> list[dict[str, object]]:
    response = http.get(f"/v1/webhooks/{webhook}/deliveries", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, object]] = response.json()["data"]
    return found


def settled(
    http: httpx.Client, webhook: str, status: str, timeout: float = 30
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        found = deliveries(http, webhook)
        if found and found[0]["status"] == status:
            return found[0]
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def test_a_finished_turn_is_posted_signed_to_its_owner_s_webhook(
    http: httpx.Client, receiver: Receiver, fake_llm: FakeLLMServer
) -> None:
    created = http.post("/v1/webhooks", json={"url": receiver.url, "description": "my CRM"})
    assert created.status_code == 201, created.text
    hook = created.json()
    assert hook["secret"].startswith("whsec_")
    assert hook["event_types"] == [
        "turn.completed",
        "turn.failed",
        "turn.cancelled",
        "turn.requires_action",
    ]
    receiver.secret = hook["secret"]
    listed = http.get("/v1/webhooks").json()["data"]
    assert [(h["id"], h["secret"]) for h in listed] == [(hook["id"], None)]  # shown once

    conversation, turn = chat(http, fake_llm)
    assert finished_turn(http, turn)["status"] == "completed"
    [got] = receiver.wait_for(1)
    assert got.verified  # the Standard Webhooks library accepts the signature
    assert got.payload["type"] == "turn.completed"
    assert got.payload["data"]["conversation_id"] == conversation
    assert got.payload["data"]["turn_id"] == turn
    assert got.payload["data"]["status"] == "completed"
    delivered = settled(http, hook["id"], "delivered")
    assert delivered["message_id"] == got.id
    assert (delivered["attempts"], delivered["last_status_code"]) == (1, 200)


def test_a_receiver_that_keeps_failing_is_given_up_listed_and_sent_again_on_request(
    http: httpx.Client, receiver: Receiver, fake_llm: FakeLLMServer
) -> None:
    receiver.script = [500, 500, 502]  # every attempt of the schedule (three) fails
    hook = http.post(
        "/v1/webhooks", json={"url": receiver.url, "event_types": ["turn.completed"]}
    ).json()
    receiver.secret = hook["secret"]
    _conversation, turn = chat(http, fake_llm)
    assert finished_turn(http, turn)["status"] == "completed"
    failed = settled(http, hook["id"], "failed")
    assert (failed["attempts"], failed["last_status_code"]) == (3, 502)
    assert failed["last_error"] == "HTTP 502"  # our words, never the receiver's
    assert [d["id"] for d in deliveries(http, hook["id"], status="failed")] == [failed["id"]]
    assert deliveries(http, hook["id"], status="delivered") == []

    again = http.post(f"/v1/webhooks/{hook['id']}/deliveries/{failed['id']}/redeliver")
    assert again.status_code == 200, again.text
    assert settled(http, hook["id"], "delivered")["attempts"] == 1
    assert len(receiver.received) == 4 and len({r.id for r in receiver.received}) == 1
    assert receiver.seen == {failed["message_id"]}


def test_a_webhook_is_its_owner_s_alone_and_removing_it_stops_it(
    shared_api: Deployment, http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    conversation, _turn = chat(http, fake_llm)
    hook = http.post(
        "/v1/webhooks",
        json={"url": "https://example.com/hooks", "conversation_id": conversation},
    ).json()
    assert hook["conversation_id"] == conversation
    with shared_api.http(token=shared_api.key(owner_name("other"))) as other:
        assert other.get("/v1/webhooks").json()["data"] == []
        assert_problem(other.get(f"/v1/webhooks/{hook['id']}"), 404, "webhook_not_found")
        assert_problem(other.delete(f"/v1/webhooks/{hook['id']}"), 404, "webhook_not_found")
        assert_problem(
            other.post(
                "/v1/webhooks", json={"url": "https://x.example/", "conversation_id": conversation}
            ),
            404,
            "conversation_not_found",
        )
    assert http.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
    assert_problem(http.get(f"/v1/webhooks/{hook['id']}"), 404, "webhook_not_found")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"url": "ftp://example.com/"}, 400, "invalid_request"),
        ({"url": "https://u:p@example.com/"}, 400, "invalid_request"),
        ({"url": "https://example.com/#x"}, 400, "invalid_request"),
        (
            {"url": "https://example.com/", "event_types": ["turn.started"]},
            422,
            "validation_failed",
        ),
        ({"url": "https://example.com/", "event_types": []}, 422, "validation_failed"),
        ({"url": "https://example.com/", "secret": "mine"}, 422, "validation_failed"),
        ({}, 422, "validation_failed"),
        (
            {"url": "https://example.com/", "conversation_id": str(uuid.uuid4())},
            404,
            "conversation_not_found",
        ),
    ],
)
def test_each_bad_webhook_request_gets_its_problem_and_writes_nothing(
    http: httpx.Client, body: dict[str, object], status: int, code: str
) -> None:
    assert_problem(http.post("/v1/webhooks", json=body), status, code)
    assert http.get("/v1/webhooks").json()["data"] == []


def test_bad_delivery_requests_get_their_problems(http: httpx.Client) -> None:
    hook = http.post("/v1/webhooks", json={"url": "https://example.com/"}).json()
    assert_problem(http.get(f"/v1/webhooks/{uuid.uuid4()}/deliveries"), 404, "webhook_not_found")
    assert_problem(
        http.post(f"/v1/webhooks/{hook['id']}/deliveries/987654/redeliver"),
        404,
        "webhook_not_found",
    )
    assert_problem(
        http.get(f"/v1/webhooks/{hook['id']}/deliveries", params={"status": "lost"}),
        422,
        "validation_failed",
    )
    assert_problem(
        http.get(f"/v1/webhooks/{hook['id']}/deliveries", params={"limit": 0}),
        422,
        "validation_failed",
    )
    assert_problem(http.get("/v1/webhooks/not-a-uuid"), 422, "validation_failed")


def test_a_receiver_answering_200_mb_costs_the_real_worker_nothing(
    http: httpx.Client, fake_llm: FakeLLMServer, shared_api: Deployment, receiver: Receiver
) -> None:
    """The hostile receiver answers each attempt 500 with a 200 MB body; the worker process's
    memory, measured before and after its three attempts, stays put (it never reads an answer's
    body; before, one attempt took a worker from 306 to 871 MB). First a turn and a delivery to
    a prompt receiver, so what a worker loads for them is loaded before the measure."""
    worker = dramatiq_child(shared_api.workers[0])
    warm = http.post("/v1/webhooks", json={"url": receiver.url}).json()["id"]
    chat(http, fake_llm)
    settled(http, warm, "delivered")
    http.delete(f"/v1/webhooks/{warm}")
    hostile = HostileReceiver("huge")
    try:
        webhook = http.post("/v1/webhooks", json={"url": hostile.url}).json()["id"]
        before = rss_mb(worker)
        chat(http, fake_llm)
        failed = settled(http, webhook, "failed", timeout=60)
        grown = rss_mb(worker) - before
        assert failed["last_error"] == "HTTP 500" and failed["attempts"] == 3
        assert hostile.requests == 3
        assert grown < 30, f"the worker grew {grown:.0f} MB"
        assert hostile.bytes_sent < 3 * 50 * 2**20  # it could not push its 600 MB
    finally:
        hostile.close()
        http.delete(f"/v1/webhooks/{webhook}")
