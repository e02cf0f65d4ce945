"""Every route of the HTTP API does what its documentation says, over real HTTP against a real
uvicorn process and a real worker (one of each for the module: `shared_api`; each test has an
owner of its own)."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import (
    Deployment,
    assert_problem,
    finished_turn,
    owner_name,
    owner_rows,
)

# One deployment for the module: its tests stay on one test process (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("api-routes")

HANG = {"hang": 30}  # a model call that lasts until the turn is cancelled


@pytest.fixture
def owner() -> str:
    return owner_name("routes")


@pytest.fixture
def http(shared_api: Deployment, owner: str) -> Iterator[httpx.Client]:
    """A client of the API with a new owner's API key."""
    with shared_api.http(token=shared_api.key(owner)) as client:
        yield client


def create(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = http.post("/v1/conversations", json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def submit(http: httpx.Client, conversation_id: str, text: str, **options: Any) -> httpx.Response:
    headers = options.pop("headers", {})
    params = options.pop("params", {})
    return http.post(
        f"/v1/conversations/{conversation_id}/messages",
        json={"text": text, **options},
        headers=headers,
        params=params,
    )


def submitted_turn(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    turn: dict[str, Any] = response.json()["turn"]
    assert response.headers["location"] == f"/v1/turns/{turn['id']}"
    return turn


def hanging(http: httpx.Client, turn_id: str, fake_llm: FakeLLMServer, token: str) -> None:
    """Wait until the turn runs and its model call (the one matching `token`) hangs."""
    deadline = time.monotonic() + 30
    while not fake_llm.requests(match=token):
        assert time.monotonic() < deadline, "the model was never called"
        time.sleep(0.05)
    turn = http.get(f"/v1/turns/{turn_id}").json()
    assert turn["status"] == "running", turn


def assert_ended(http: httpx.Client, turn_id: str, status: str) -> dict[str, Any]:
    turn = finished_turn(http, turn_id)
    assert turn["status"] == status, (turn["status"], turn["error"])
    return turn


def event_types(http: httpx.Client, conversation_id: str) -> list[tuple[str, str | None]]:
    page = http.get(f"/v1/conversations/{conversation_id}/events", params={"limit": 1000})
    assert page.status_code == 200, page.text
    return [(event["type"], event["turn_id"]) for event in page.json()["data"]]


# --- conversations --------------------------------------------------------------------------------


def test_a_conversation_s_own_context_policy_is_kept_and_a_bad_one_refused(
    http: httpx.Client, owner: str, shared_api: Deployment
) -> None:
    policy = {"window": 32_000, "threshold": 0.7, "compaction": True, "summary_model": "m"}
    created = http.post("/v1/conversations", json={"tools": ["add"], "context_policy": policy})
    assert created.status_code == 201, created.text
    read = http.get(f"/v1/conversations/{created.json()['id']}").json()
    assert read["context_policy"] == policy
    before = http.get("/v1/conversations").json()["data"]
    refused = http.post("/v1/conversations", json={"context_policy": {"threshold": 2}})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_request"
    assert "context_policy.threshold must be from 0.1 to 1" in refused.json()["detail"]
    assert http.get("/v1/conversations").json()["data"] == before  # nothing written


def test_a_conversation_is_created_read_listed_by_pages_and_deleted(
    http: httpx.Client, owner: str, shared_api: Deployment
) -> None:
    response = http.post(
        "/v1/conversations",
        json={
            "instructions": "Answer briefly.",
            "tools": ["add"],
            "tool_choice": "auto",
            "context": {"ticket": 42, "tags": ["a"]},
        },
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert response.headers["location"] == f"/v1/conversations/{created['id']}"
    assert created["object"] == "conversation"
    assert (created["status"], created["error"], created["turn_number"]) == ("idle", None, 0)
    assert (created["instructions"], created["tools"]) == ("Answer briefly.", ["add"])
    assert created["context"] == {"ticket": 42, "tags": ["a"]}
    assert created["model"] == "openai/fake-model"
    assert created["usage"] == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
        "cached_tokens": 0,
    }

    read = http.get(f"/v1/conversations/{created['id']}")
    assert read.status_code == 200, read.text
    assert read.json() == {**created, "messages": []}

    more = [create(http)["id"] for _ in range(2)]  # newest last
    first = http.get("/v1/conversations", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [c["id"] for c in page["data"]] == [more[1], more[0]]  # newest first
    assert all(c["messages"] is None for c in page["data"])
    assert page["next_before"] == more[0]
    second = http.get("/v1/conversations", params={"limit": 2, "before": page["next_before"]})
    assert second.status_code == 200, second.text
    assert [c["id"] for c in second.json()["data"]] == [created["id"]]
    assert second.json()["next_before"] is None

    deleted = http.delete(f"/v1/conversations/{created['id']}")
    assert deleted.status_code == 204, deleted.text
    assert deleted.content == b""
    assert_problem(http.get(f"/v1/conversations/{created['id']}"), 404, "conversation_not_found")
    assert_problem(http.delete(f"/v1/conversations/{created['id']}"), 404, "conversation_not_found")
    listed = http.get("/v1/conversations").json()["data"]
    assert [c["id"] for c in listed] == [more[1], more[0]]
    assert owner_rows(shared_api.database_url, owner)["conversations"] == 2


def test_a_chosen_id_returns_the_same_conversation_and_other_fields_conflict(
    http: httpx.Client, owner: str, shared_api: Deployment
) -> None:
    chosen = str(uuid.uuid4())
    fields = {"id": chosen, "instructions": "Be kind.", "tools": ["add"]}
    first = http.post("/v1/conversations", json=fields)
    assert first.status_code == 201, first.text
    again = http.post("/v1/conversations", json=fields)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert again.headers["location"] == f"/v1/conversations/{chosen}"

    other = http.post("/v1/conversations", json={**fields, "instructions": "Be terse."})
    assert_problem(other, 409, "conversation_conflict")
    assert http.get(f"/v1/conversations/{chosen}").json()["instructions"] == "Be kind."
    assert owner_rows(shared_api.database_url, owner)["conversations"] == 1


def test_deleting_a_conversation_while_its_turn_runs_is_refused(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    conversation = create(http)
    turn = submitted_turn(submit(http, conversation["id"], f"hold {token}"))
    hanging(http, turn["id"], fake_llm, token)

    busy = assert_problem(
        http.delete(f"/v1/conversations/{conversation['id']}"), 409, "conversation_busy"
    )
    assert busy["turn_id"] == turn["id"]
    assert http.get(f"/v1/conversations/{conversation['id']}").status_code == 200

    assert http.post(f"/v1/turns/{turn['id']}/cancel").status_code == 202
    assert_ended(http, turn["id"], "cancelled")
    assert http.delete(f"/v1/conversations/{conversation['id']}").status_code == 204


# --- messages and turns ---------------------------------------------------------------------------


def test_a_message_becomes_a_turn_and_its_idempotency_key_replays_it_without_running_twice(
    http: httpx.Client, owner: str, shared_api: Deployment, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Hello back.", "delay": 0.5}], match=token)
    conversation = create(http)
    key = {"Idempotency-Key": f"key-{token}"}

    response = submit(http, conversation["id"], f"hello {token}", headers=key)
    turn = submitted_turn(response)
    body = response.json()
    assert (body["repeated"], body["turn"]["number"], body["turn"]["kind"]) == (False, 1, "message")
    assert body["turn"]["idempotency_key"] == f"key-{token}"
    assert "idempotent-replayed" not in response.headers

    replayed = submit(http, conversation["id"], f"hello {token}", headers=key)
    assert submitted_turn(replayed)["id"] == turn["id"]
    assert replayed.json()["repeated"] is True
    assert replayed.headers["idempotent-replayed"] == "true"

    reused = submit(http, conversation["id"], f"something else {token}", headers=key)
    assert_problem(reused, 422, "idempotency_key_reused")

    assert_ended(http, turn["id"], "completed")
    late = submit(http, conversation["id"], f"hello {token}", headers=key)  # after the end too
    assert submitted_turn(late)["id"] == turn["id"]
    assert late.json()["turn"]["status"] == "completed"
    assert late.headers["idempotent-replayed"] == "true"

    assert len(fake_llm.requests(match=token)) == 1  # the model was asked once
    transcript = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    assert [(m["role"], m["content"]) for m in transcript] == [
        ("user", f"hello {token}"),
        ("assistant", "Hello back."),
    ]
    rows = owner_rows(shared_api.database_url, owner)
    assert (rows["turns"], rows["messages"]) == (1, 2)


def test_wait_true_answers_when_the_turn_ends_with_its_output_text_and_messages(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "2 + 3 = 5"},
        ],
        match=token,
        mode="by_iteration",
    )
    conversation = create(http, tools=["add"])
    response = submit(http, conversation["id"], f"add {token}", params={"wait": "true"})
    assert response.status_code == 200, response.text
    result = response.json()
    assert response.headers["location"] == f"/v1/turns/{result['turn']['id']}"
    assert result["finished"] is True
    assert result["turn"]["status"] == "completed"
    assert result["output_text"] == "2 + 3 = 5"
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert result["messages"][1]["tool_calls"][0]["name"] == "add"
    assert float(result["messages"][2]["content"]) == 5
    assert result["turn"]["usage"]["total_tokens"] > 0
    # each message as GET shows it, its versions too
    read = {m["seq"]: m for m in messages_of(http, conversation["id"])}
    assert [m["siblings"] for m in result["messages"]] == [[m["seq"]] for m in result["messages"]]
    assert [read[m["seq"]]["siblings"] for m in result["messages"]] == [
        m["siblings"] for m in result["messages"]
    ]


TICKET = {
    "name": "ticket",
    "schema": {
        "type": "object",
        "properties": {"kind": {"enum": ["bug", "question"]}},
        "required": ["kind"],
    },
}


def test_a_structured_answer_comes_parsed_beside_its_text_and_a_bad_schema_is_refused(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    # (the second turn's request holds the first's message, token and all: one script)
    fake_llm.script([{"text": '{"kind": "bug"}'}, {"text": '{"yes": false}'}], match=token)
    conversation = create(http, output_schema=TICKET, fallback_models=["openai/gpt-4o"])
    assert conversation["output_schema"] == {**TICKET, "strict": False}
    assert conversation["fallback_models"] == ["openai/gpt-4o"]
    response = submit(http, conversation["id"], f"classify {token}", params={"wait": "true"})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["output_text"] == '{"kind": "bug"}' and result["output"] == {"kind": "bug"}
    assert result["messages"][-1]["output"] == {"kind": "bug"}
    assert result["messages"][-1]["usage"]["model"] == conversation["model"]
    # a message's own schema, over the conversation's: its turn says so
    yes_no = {"schema": {"type": "object", "properties": {"yes": {"type": "boolean"}}}}
    second = submit(
        http, conversation["id"], "yes?", output_schema=yes_no, params={"wait": "true"}
    ).json()
    assert second["output"] == {"yes": False}, (second["turn"], second["messages"])
    assert second["turn"]["output_schema"] == {**yes_no, "name": "answer", "strict": False}
    # bad schemas: 400 invalid_output_schema, naming what is wrong; nothing written
    before = http.get("/v1/conversations").json()["data"]
    for bad, says in (
        ({"schema": {"type": "array"}}, '"type": "object"'),
        ({"schema": {"type": "object", "properties": {"a": {"type": 1}}}}, "not a valid JSON"),
        ({"schema": {"type": "object", "$ref": "http://x.test/s"}}, "points outside"),
    ):
        refused = http.post("/v1/conversations", json={"output_schema": bad})
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid_output_schema"
        assert says in refused.json()["detail"]
        refused = submit(http, conversation["id"], "x", output_schema=bad)
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_output_schema"
    fallbacks = http.post("/v1/conversations", json={"fallback_models": ["a", "a"]})
    assert fallbacks.status_code == 400 and "is named twice" in fallbacks.json()["detail"]
    assert http.get("/v1/conversations").json()["data"] == before
    messages = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    assert len(messages) == 4


def test_a_message_s_image_is_sent_to_the_model_and_read_back_by_its_owner_only(
    http: httpx.Client, fake_llm: FakeLLMServer, shared_api: Deployment
) -> None:
    from tests.integration.test_files import PDF, png

    token = uuid.uuid4().hex
    fake_llm.script([{"text": "A grey square."}], match=token)
    image = png(seed=11)
    data_url = "data:image/png;base64," + base64.b64encode(image).decode()
    conversation = create(http, model="openai/gpt-4o-mini")
    response = submit(
        http,
        conversation["id"],
        f"what is it? {token}",
        files=[{"name": "square.png", "data": data_url}],
        params={"wait": "true"},
    )
    assert response.status_code == 200, response.text
    result = response.json()
    (sent,) = fake_llm.requests(match=token)
    parts = sent["body"]["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": data_url}} in parts
    (file,) = result["messages"][0]["files"]
    assert file["name"] == "square.png" and file["size"] == len(image)
    got = http.get(f"/v1/files/{file['id']}")
    assert got.status_code == 200 and got.content == image
    assert got.headers["content-type"] == "image/png"
    assert got.headers["content-disposition"].startswith("inline")
    # another owner: 404 file_not_found, as for an id nobody has
    with shared_api.http(token=shared_api.key(owner_name("other"))) as other:
        assert other.get(f"/v1/files/{file['id']}").json()["code"] == "file_not_found"
    assert http.get(f"/v1/files/{uuid.uuid4()}").json()["code"] == "file_not_found"
    # bad files: each refused with its code, nothing written
    before = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    pdf = base64.b64encode(PDF).decode()
    for files, status, code in (
        ([{"data": pdf, "media_type": "image/png"}], 400, "invalid_file"),
        ([{"data": "%%%"}], 400, "invalid_file"),
        ([{"data": base64.b64encode(b"x" * 10_000_001).decode()}], 413, "file_too_large"),
    ):
        refused = submit(http, conversation["id"], "look", files=files)
        assert refused.status_code == status, refused.text
        assert refused.json()["code"] == code
    text_only = create(http, model="openai/fake-model")
    refused = submit(http, text_only["id"], "look", files=[{"data": data_url}])
    assert refused.status_code == 400 and refused.json()["code"] == "file_not_taken"
    assert "'openai/fake-model' does not take image/png" in refused.json()["detail"]
    after = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    assert after == before


def test_on_busy_reject_names_the_running_turn_and_enqueue_runs_behind_it(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG, {"text": "Second answer."}], match=token)
    conversation = create(http)
    first = submitted_turn(submit(http, conversation["id"], f"first {token}"))
    hanging(http, first["id"], fake_llm, token)

    rejected = submit(http, conversation["id"], "second", on_busy="reject")
    assert assert_problem(rejected, 409, "conversation_busy")["turn_id"] == first["id"]
    default = submit(http, conversation["id"], "second")  # reject is the default
    assert assert_problem(default, 409, "conversation_busy")["turn_id"] == first["id"]

    queued = submitted_turn(submit(http, conversation["id"], "second", on_busy="enqueue"))
    assert (queued["status"], queued["number"]) == ("queued", 2)
    cancelled = http.post(f"/v1/turns/{first['id']}/cancel")
    assert cancelled.status_code == 202, cancelled.text

    assert_ended(http, first["id"], "cancelled")
    assert_ended(http, queued["id"], "completed")
    transcript = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    assert [(m["role"], m["content"]) for m in transcript] == [
        ("user", f"first {token}"),
        ("user", "second"),
        ("assistant", "Second answer."),
    ]


def test_on_busy_interrupt_cancels_the_running_turn_and_runs_the_new_one(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG, {"text": "Interrupted, then answered."}], match=token)
    conversation = create(http)
    first = submitted_turn(submit(http, conversation["id"], f"first {token}"))
    hanging(http, first["id"], fake_llm, token)

    second = submitted_turn(submit(http, conversation["id"], "instead", on_busy="interrupt"))
    assert second["number"] == 2

    assert_ended(http, first["id"], "cancelled")
    assert_ended(http, second["id"], "completed")
    events = event_types(http, conversation["id"])
    assert ("turn.cancelled", first["id"]) in events
    assert ("turn.completed", second["id"]) in events


def test_a_turn_is_read_and_cancelled_running_then_finished_twice_harmlessly(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    conversation = create(http)
    turn = submitted_turn(submit(http, conversation["id"], f"hold {token}"))
    read = http.get(f"/v1/turns/{turn['id']}")
    assert read.status_code == 200, read.text
    assert read.json()["object"] == "turn"
    assert read.json()["conversation_id"] == conversation["id"]
    hanging(http, turn["id"], fake_llm, token)

    asked = http.post(f"/v1/turns/{turn['id']}/cancel")
    assert asked.status_code == 202, asked.text
    assert asked.json()["id"] == turn["id"]
    assert asked.json()["cancel_requested_at"] is not None

    ended = finished_turn(http, turn["id"])
    assert (ended["status"], ended["error"]) == ("cancelled", None)
    assert ("turn.cancelled", turn["id"]) in event_types(http, conversation["id"])
    for _ in range(2):  # a finished turn comes back unchanged
        again = http.post(f"/v1/turns/{turn['id']}/cancel")
        assert again.status_code == 200, again.text
        assert again.json() == ended
    assert [t for t, _ in event_types(http, conversation["id"])].count("turn.cancelled") == 1


def test_a_conversation_cancel_stops_its_current_turn(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([HANG], match=token)
    conversation = create(http)
    path = f"/v1/conversations/{conversation['id']}/cancel"
    before = http.post(path)  # no turn yet
    assert before.status_code == 200, before.text
    assert before.json() is None

    turn = submitted_turn(submit(http, conversation["id"], f"hold {token}"))
    hanging(http, turn["id"], fake_llm, token)
    asked = http.post(path)
    assert asked.status_code == 202, asked.text
    assert asked.json()["id"] == turn["id"]
    assert_ended(http, turn["id"], "cancelled")
    after = http.post(path)
    assert after.status_code == 200, after.text
    assert (after.json()["id"], after.json()["status"]) == (turn["id"], "cancelled")


def test_a_failed_conversation_is_retried_and_only_a_failed_one(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [{"error": 400, "message": "the model refuses"}, {"text": "Fine now."}], match=token
    )
    conversation = create(http)
    path = f"/v1/conversations/{conversation['id']}"
    assert_problem(http.post(f"{path}/retry"), 409, "not_retryable")  # idle, never failed

    turn = submitted_turn(submit(http, conversation["id"], f"try {token}"))
    failed = finished_turn(http, turn["id"])
    assert failed["status"] == "failed"
    assert "the model refuses" in failed["error"]
    assert http.get(path).json()["status"] == "failed"

    retried = http.post(f"{path}/retry")
    assert retried.status_code == 202, retried.text
    retry = retried.json()["turn"]
    assert retried.headers["location"] == f"/v1/turns/{retry['id']}"
    assert (retry["kind"], retry["number"]) == ("retry", 2)
    assert_ended(http, retry["id"], "completed")
    assert http.get(path).json()["status"] == "idle"
    assert_problem(http.post(f"{path}/retry"), 409, "not_retryable")


# --- events ---------------------------------------------------------------------------------------


def test_events_come_in_pages_and_a_long_poll_returns_when_an_event_commits(
    http: httpx.Client, shared_api: Deployment
) -> None:
    conversation = create(http)
    path = f"/v1/conversations/{conversation['id']}"
    empty = http.get(f"{path}/events")
    assert empty.status_code == 200, empty.text
    assert empty.json() == {
        "conversation_id": conversation["id"],
        "data": [],
        "last_seq": 0,
        "status": "idle",
        "next_after": None,
    }
    turn = submitted_turn(submit(http, conversation["id"], "hello"))
    assert_ended(http, turn["id"], "completed")

    seqs: list[int] = []
    after = 0
    while True:
        page = http.get(f"{path}/events", params={"after": after, "limit": 2}).json()
        assert len(page["data"]) <= 2
        seqs += [event["seq"] for event in page["data"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seqs == list(range(1, page["last_seq"] + 1))
    assert page["last_seq"] >= 4  # submitted, started, messages, completed, status changes
    last = page["last_seq"]

    started = time.monotonic()
    idle = http.get(f"{path}/events", params={"after": last, "wait": 0.5})
    assert idle.status_code == 200, idle.text
    assert idle.json()["data"] == []
    assert 0.4 <= time.monotonic() - started < 15  # its 0.5 s, not a longer hold (60 s at most)

    with (
        ThreadPoolExecutor(1) as pool,
        shared_api.http(token=http.headers["authorization"].removeprefix("Bearer ")) as other,
    ):
        started = time.monotonic()
        polled = pool.submit(http.get, f"{path}/events", params={"after": last, "wait": 20})
        time.sleep(0.5)
        assert not polled.done()  # it waits
        later = submitted_turn(submit(other, conversation["id"], "again"))
        answer = polled.result(timeout=20)
        waited = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"][0]["seq"] == last + 1
    assert answer.json()["data"][0]["turn_id"] == later["id"]
    assert 0.5 <= waited < 10  # it answered when the event committed, not at the deadline
    finished_turn(http, later["id"])


def test_the_stream_of_an_idle_conversation_replays_its_log_and_ends_when_asked(
    http: httpx.Client,
) -> None:
    conversation = create(http)
    turn = submitted_turn(submit(http, conversation["id"], "hello"))
    finished_turn(http, turn["id"])
    path = f"/v1/conversations/{conversation['id']}/stream"
    with connect_sse(http, "GET", path, params={"until": "rest"}) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        seen = [(sse.event, sse.id) for sse in source.iter_sse()]
    assert seen[-1][0] == "stream.end"
    committed = [int(sse_id) for event, sse_id in seen[:-1] if event != "message.delta"]
    assert committed == list(range(1, len(committed) + 1))
    # Resuming after the last id replays nothing and ends at once.
    with connect_sse(
        http, "GET", path, params={"until": "rest"}, headers={"Last-Event-ID": str(committed[-1])}
    ) as source:
        assert [sse.event for sse in source.iter_sse()] == ["stream.end"]


# --- the system routes ----------------------------------------------------------------------------


def test_tools_health_ready_the_openapi_document_and_the_page(
    http: httpx.Client, shared_api: Deployment
) -> None:
    tools = http.get("/v1/tools")
    assert tools.status_code == 200, tools.text
    by_name = {tool["name"]: tool for tool in tools.json()["data"]}
    assert {"add", "search_docs", "slow", "fail"} <= by_name.keys()
    assert by_name["add"]["server"] == "tools"
    assert by_name["add"]["input_schema"]["required"] == ["a", "b"]
    assert by_name["add"]["description"]

    with shared_api.http() as anonymous:  # none of these needs credentials
        assert anonymous.get("/v1/health").json() == {"status": "ok"}
        ready = anonymous.get("/v1/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ok", "database": "ok", "live": "ok"}
        document = anonymous.get("/openapi.json")
        assert document.status_code == 200, document.text
        spec = document.json()
        assert spec["info"]["title"] == "chatworker"
        assert "/v1/conversations/{conversation_id}/messages" in spec["paths"]
        assert "Problem" in spec["components"]["schemas"]
        page = anonymous.get("/")
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "<html" in page.text.lower()
        assert_problem(anonymous.get("/v1/tools"), 401, "unauthenticated")
        assert_problem(anonymous.get("/v1/nowhere"), 404, "not_found")
        refused = anonymous.put("/v1/health")
        assert_problem(refused, 405, "method_not_allowed")
        assert refused.headers["allow"] == "GET"
        # Two routes share the path: Allow names the methods of both.
        refused = anonymous.put("/v1/conversations")
        assert_problem(refused, 405, "method_not_allowed")
        assert refused.headers["allow"] == "GET, POST"


# --- turns that wait for the user -----------------------------------------------------------------

LOCATE = {
    "name": "get_location",
    "description": "The user's city, from their browser.",
    "parameters": {"type": "object", "properties": {}},
}


def waiting_turn(http: httpx.Client, turn_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        turn: dict[str, Any] = http.get(f"/v1/turns/{turn_id}").json()
        if turn["status"] == "requires_action":
            return turn
        assert time.monotonic() < deadline, f"turn still {turn['status']} after {timeout} s"
        time.sleep(0.05)


def test_a_client_tool_call_waits_for_its_output_posted_to_the_turn_s_actions(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script(
        [
            {"tool_calls": [{"id": "c_loc", "name": "get_location", "arguments": {}}]},
            {"text": "You are in Paris."},
        ],
        match=token,
        mode="by_iteration",
    )
    conversation = create(http, client_tools=[LOCATE])
    assert conversation["client_tools"] == [LOCATE] and conversation["clarify"] is True
    response = submit(http, conversation["id"], f"where am I {token}", params={"wait": "true"})
    assert response.status_code == 200, response.text  # ?wait=true answers once it waits, too
    turn = response.json()["turn"]
    assert turn["status"] == "requires_action"
    ((action,),) = [turn["actions"]]
    assert action == {
        "call_id": "c_loc",
        "kind": "client_tool",
        "name": "get_location",
        "arguments": {},
        "answered": False,
        "decision": None,  # (an approval's)
        "reason": None,  # (said when it is not obvious)
    }
    actions = f"/v1/turns/{turn['id']}/actions"
    assert_problem(
        http.post(actions, json={"outputs": [{"call_id": "nope", "output": "x"}]}),
        404,
        "action_not_found",
    )
    answered = http.post(actions, json={"outputs": [{"call_id": "c_loc", "output": "Paris"}]})
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "running"
    assert answered.json()["actions"][0]["answered"] is True
    assert finished_turn(http, turn["id"])["status"] == "completed"
    again = http.post(actions, json={"outputs": [{"call_id": "c_loc", "output": "Paris"}]})
    assert again.status_code == 200 and again.json()["status"] == "completed"  # harmless
    assert_problem(
        http.post(actions, json={"outputs": [{"call_id": "c_loc", "output": "London"}]}),
        409,
        "action_already_answered",
    )
    events = http.get(f"/v1/conversations/{conversation['id']}/events", params={"limit": 100})
    assert "action.required" in [e["type"] for e in events.json()["data"]]


def test_the_model_s_question_is_answered_by_the_next_message(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    ask = {"question": "Which report?"}
    fake_llm.script(
        [
            {"tool_calls": [{"id": "ask", "name": "agent_clarify", "arguments": ask}]},
            {"text": "Here is Q3."},
        ],
        match=token,
        mode="by_iteration",
    )
    conversation = create(http, tools=["add"])
    first = submit(http, conversation["id"], f"the report {token}").json()["turn"]["id"]
    turn = waiting_turn(http, first)
    assert [(a["kind"], a["arguments"]) for a in turn["actions"]] == [("clarification", ask)]
    answer = submit(http, conversation["id"], "Q3")
    assert answer.status_code == 202, answer.text
    assert answer.json()["turn"]["id"] == first  # the same turn goes on
    done = finished_turn(http, first)
    assert done["status"] == "completed"
    messages = http.get(f"/v1/conversations/{conversation['id']}").json()["messages"]
    assert [(m["role"], m["content"]) for m in messages][1:] == [
        ("assistant", None),
        ("tool", "Q3"),
        ("assistant", "Here is Q3."),
    ]


# --- the tree: edit, regenerate, switch, fork, rollback -----------------------------------------


def messages_of(http: httpx.Client, conversation_id: str, **params: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = http.get(
        f"/v1/conversations/{conversation_id}", params=params
    ).json()["messages"]
    return found


def test_a_message_is_edited_an_answer_regenerated_and_the_versions_switched_over_http(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "First."}, {"text": "Edited."}, {"text": "Again."}], match=token)
    conversation = create(http)
    cid = conversation["id"]
    assert_ended(http, submitted_turn(submit(http, cid, f"hello {token}"))["id"], "completed")

    edit = http.post(f"/v1/conversations/{cid}/messages/1/edit", json={"text": f"hi {token}"})
    assert_ended(http, submitted_turn(edit)["id"], "completed")
    again = http.post(f"/v1/conversations/{cid}/regenerate", json={})
    regenerated = submitted_turn(again)
    assert regenerated["kind"] == "regenerate"
    assert_ended(http, regenerated["id"], "completed")

    path = messages_of(http, cid)
    assert [(m["seq"], m["content"], m["siblings"], m["version"]) for m in path] == [
        (3, f"hi {token}", [1, 3], 2),
        (5, "Again.", [4, 5], 2),
    ]
    assert path[1]["version_count"] == 2 and path[1]["parent_seq"] == 3
    everything = messages_of(http, cid, versions="all")
    assert [(m["seq"], m["active"]) for m in everything] == [
        (1, False), (2, False), (3, True), (4, False), (5, True),
    ]  # fmt: skip

    switched = http.post(f"/v1/conversations/{cid}/switch", json={"seq": 1})
    assert switched.status_code == 200, switched.text
    assert [m["content"] for m in switched.json()["messages"]] == [f"hello {token}", "First."]
    assert [m["seq"] for m in messages_of(http, cid)] == [1, 2]  # the same after a reload
    types = [e["type"] for e in http.get(f"/v1/conversations/{cid}/events").json()["data"]]
    assert types.count("branch.switched") == 3  # the edit, the regenerate, the switch

    fork = http.post(f"/v1/conversations/{cid}/fork", json={"seq": 1})
    assert fork.status_code == 201, fork.text
    forked = fork.json()
    assert fork.headers["location"] == f"/v1/conversations/{forked['id']}"
    assert (forked["forked_from"], forked["forked_at_seq"]) == (cid, 1)
    assert [m["content"] for m in forked["messages"]] == [f"hello {token}"]


def test_the_tree_s_bad_requests_get_their_problems_over_http(
    http: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    token = uuid.uuid4().hex
    fake_llm.script([{"text": "Answer."}, HANG, {"text": "Instead."}], match=token)
    conversation = create(http)
    cid = conversation["id"]
    assert_ended(http, submitted_turn(submit(http, cid, f"hello {token}"))["id"], "completed")

    missing = http.post(f"/v1/conversations/{cid}/messages/9/edit", json={"text": "x"})
    assert_problem(missing, 404, "message_not_found")
    assistant = http.post(f"/v1/conversations/{cid}/messages/2/edit", json={"text": "x"})
    assert "only a user message" in assert_problem(assistant, 409, "not_branchable")["detail"]
    zero = http.post(f"/v1/conversations/{cid}/switch", json={"seq": 0})
    assert_problem(zero, 422, "validation_failed")
    steer = http.post(
        f"/v1/conversations/{cid}/messages/1/edit", json={"text": "x", "on_busy": "steer"}
    )
    assert_problem(steer, 422, "validation_failed")  # an edit cannot steer: not a valid body
    typo = http.post(f"/v1/conversations/{cid}/fork", json={"sec": 1})
    assert_problem(typo, 422, "validation_failed")
    elsewhere = http.post(f"/v1/conversations/{uuid.uuid4()}/regenerate", json={})
    assert_problem(elsewhere, 404, "conversation_not_found")

    running = submitted_turn(submit(http, cid, "more"))
    deadline = time.monotonic() + 30
    while len(fake_llm.requests(match=token)) < 2:  # the second call hangs
        assert time.monotonic() < deadline, "the model was never called"
        time.sleep(0.05)
    busy = http.post(f"/v1/conversations/{cid}/switch", json={"seq": 1})
    assert assert_problem(busy, 409, "conversation_busy")["turn_id"] == running["id"]
    rolled = submitted_turn(submit(http, cid, "instead", on_busy="rollback"))
    assert_ended(http, running["id"], "cancelled")
    assert_ended(http, rolled["id"], "completed")
    path = messages_of(http, cid)
    assert [m["content"] for m in path][:3] == [f"hello {token}", "Answer.", "instead"]
    assert path[2]["siblings"] == [3, path[2]["seq"]]  # the rolled-back message: a version
