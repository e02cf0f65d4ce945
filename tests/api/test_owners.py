"""Owners are isolated on every route of the OpenAPI document (read at test time, so a new route
cannot skip the check): bob naming alice's conversation or turn gets exactly the 404 of an id
that does not exist, and nothing of hers; the routes without an id show him nothing of hers.
A JWT's `sub` is the same owner as an API key's; auth `none` sees every conversation.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import (
    JWT_SECRET,
    Deployment,
    assert_problem,
    finished_turn,
    owner_name,
    owner_rows,
)

# One deployment for the module: its tests stay on one test process (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("api-owners")

# Alice's turn runs (its model call hangs) for the whole module: the worker waits that long.
API_ENV = {"CHATWORKER_LLM_TIMEOUT_SECONDS": "300"}
HANG_SECONDS = 240

# A body for every operation that takes one (a new one must be added here, or the test fails).
# Bob asks for the most he could get: alice's chosen id, an interrupt of her running turn.
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/conversations"): lambda alice: {"id": alice.conversation},
    ("post", "/v1/conversations/{conversation_id}/messages"): lambda _: {
        "text": "bob was here",
        "on_busy": "interrupt",
    },
    ("post", "/v1/turns/{turn_id}/actions"): lambda _: {
        "outputs": [{"call_id": "call_1", "output": "bob's answer"}]
    },
    ("post", "/v1/responses"): lambda alice: {
        "model": "fake-model",
        "input": "bob was here",
        "conversation": alice.conversation,
    },
    ("post", "/v1/ai-sdk/chat"): lambda alice: {
        "id": alice.conversation,
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "bob"}]}],
    },
    ("post", "/v1/conversations/{conversation_id}/messages/{seq}/edit"): lambda _: {
        "text": "bob was here",
        "on_busy": "interrupt",
    },
    ("post", "/v1/conversations/{conversation_id}/regenerate"): lambda _: {"on_busy": "interrupt"},
    ("post", "/v1/conversations/{conversation_id}/switch"): lambda _: {"seq": 1},
    ("post", "/v1/conversations/{conversation_id}/fork"): lambda _: {},
    # Tool messages answering a call of hers: his history can only continue his own turns.
    ("post", "/v1/chat/completions"): lambda _: {
        "model": "fake-model",
        "messages": [
            {"role": "user", "content": "bob"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "bob's answer"},
        ],
    },
    ("post", "/v1/admin/turns/bulk"): lambda _: {"action": "cancel"},
    # (naming her conversation gets him its 404, tested in tests/api/test_webhooks_api.py)
    ("post", "/v1/webhooks"): lambda _: {"url": "https://bob.example/hooks"},
}
# Query parameters that keep a wrongly answered request short.
QUERIES: dict[tuple[str, str], dict[str, str]] = {
    ("get", "/v1/conversations/{conversation_id}/stream"): {"until": "rest"},
    ("get", "/v1/conversations/{conversation_id}/events"): {"wait": "0"},
    ("post", "/v1/conversations/{conversation_id}/messages"): {"wait": "false"},
}
NOT_FOUND = {
    "conversation_id": "conversation_not_found",
    "turn_id": "turn_not_found",
    "webhook_id": "webhook_not_found",
    "response_id": "response_not_found",
    "file_id": "file_not_found",
}
# Routes with no id in their path, and what bob may get from them.
WITHOUT_ID = {
    ("get", "/v1/health"): 200,
    ("get", "/v1/ready"): 200,
    ("get", "/v1/tools"): 200,
    ("get", "/v1/conversations"): 200,
    ("get", "/v1/webhooks"): 200,
    ("post", "/v1/webhooks"): 201,  # his own
    # Bob choosing alice's conversation id: taken, by whom is never said.
    ("post", "/v1/conversations"): 409,
    # Bob continuing alice's conversation through the OpenAI dialect: not found.
    ("post", "/v1/responses"): 404,
    # Bob naming alice's conversation as his AI SDK chat: its id is taken, as above.
    ("post", "/v1/ai-sdk/chat"): 409,
    # Bob answering a call through Chat Completions: not a call made for him.
    ("post", "/v1/chat/completions"): 400,
    ("get", "/v1/models"): 200,
}
# Path parameters naming something bob may name as his own (an AI SDK chat id is any string): he
# gets exactly what a chat never used gets (204 to resume it, `stopped: false`).
AS_NEVER_USED = {"chat_id"}


@dataclass
class Alice:
    name: str
    key: str
    conversation: str
    turn: str
    secret: str  # in her instructions, context and message: must never reach bob
    webhook: str  # on her conversation, with her secret in its URL and description
    file: str  # her message's file, her secret in its name and its bytes


def jwt_for(owner: str) -> str:
    return jwt.encode({"sub": owner, "exp": int(time.time()) + 600}, JWT_SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def alice(shared_api: Deployment, fake_llm_server: FakeLLMServer) -> Iterator[Alice]:
    """Alice's conversation, with a turn that runs (its model call hangs) until she cancels it
    at the end of the module."""
    name = owner_name("alice")
    key = shared_api.key(name)
    secret = f"alice-secret-{uuid.uuid4().hex}"
    fake_llm_server.script([{"hang": HANG_SECONDS}], match=secret)
    with shared_api.http(token=key) as http:
        conversation = http.post(
            "/v1/conversations",
            json={"instructions": f"Remember {secret}.", "context": {"note": secret}},
        ).json()["id"]
        attached = {
            "name": f"{secret}.txt",
            "data": base64.b64encode(f"the file of {secret}".encode()).decode(),
        }
        submitted = http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"text": f"my {secret}", "files": [attached]},
        )
        assert submitted.status_code == 202, submitted.text
        turn = submitted.json()["turn"]["id"]
        (file,) = http.get(f"/v1/conversations/{conversation}").json()["messages"][0]["files"]
        deadline = time.monotonic() + 30
        while not fake_llm_server.requests(match=secret):  # the model call hangs from now on
            assert time.monotonic() < deadline, "alice's turn never called the model"
            time.sleep(0.05)
        assert http.get(f"/v1/turns/{turn}").json()["status"] == "running"
        webhook = http.post(
            "/v1/webhooks",
            json={
                "url": f"https://alice.example/{secret}",
                "conversation_id": conversation,
                "description": secret,
            },
        ).json()["id"]
        yield Alice(name, key, conversation, turn, secret, webhook, file["id"])
        http.post(f"/v1/turns/{turn}/cancel")
        assert finished_turn(http, turn)["status"] == "cancelled"


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    methods = {"get", "post", "put", "patch", "delete"}
    return [
        (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in methods
    ]


def call(
    http: httpx.Client,
    method: str,
    path: str,
    *,
    operation: dict[str, Any],
    alice: Alice,
    ids: dict[str, str],
) -> httpx.Response:
    params = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
    unknown = [name for name in params if name not in ids]
    assert not unknown, f"{method} {path}: teach this test the path parameter(s) {unknown}"
    body = None
    if "requestBody" in operation:
        assert (method, path) in BODIES, f"{method} {path}: add a body to BODIES"
        body = BODIES[method, path](alice)
    return http.request(
        method.upper(),
        path.format(**ids),
        json=body,
        params=QUERIES.get((method, path), {}),
        timeout=10,
    )


def alice_state(shared_api: Deployment, alice: Alice) -> tuple[Any, ...]:
    with shared_api.http(token=alice.key) as http:
        conversation = http.get(f"/v1/conversations/{alice.conversation}").json()
        conversation.pop("updated_at")  # the worker's heartbeat touches it while the turn runs
        turn = http.get(f"/v1/turns/{alice.turn}").json()
        events = http.get(f"/v1/conversations/{alice.conversation}/events").json()
        webhooks = http.get("/v1/webhooks").json()
    return conversation, turn, events, webhooks, owner_rows(shared_api.database_url, alice.name)


def test_every_route_hides_alices_conversation_and_turn_from_bob(
    shared_api: Deployment, alice: Alice
) -> None:
    """Bob with an API key, then another bob with a JWT."""
    bob = owner_name("bob")
    probe_as_bob(shared_api, alice, bob, shared_api.key(bob))
    bob = owner_name("bob")
    probe_as_bob(shared_api, alice, bob, jwt_for(bob))


def probe_as_bob(shared_api: Deployment, alice: Alice, bob: str, token: str) -> None:
    before = alice_state(shared_api, alice)
    assert before[1]["status"] == "running"
    hers = {
        "conversation_id": alice.conversation,
        "turn_id": alice.turn,
        "webhook_id": alice.webhook,
        "delivery_id": "424242",
        "response_id": "resp_" + uuid.UUID(alice.turn).hex,
        "chat_id": alice.conversation,
        "seq": "1",  # (her first message)
        "file_id": alice.file,
    }
    nobodys = {
        "conversation_id": str(uuid.uuid4()),
        "turn_id": str(uuid.uuid4()),
        "webhook_id": str(uuid.uuid4()),
        "delivery_id": "424242",
        "response_id": "resp_" + uuid.uuid4().hex,
        "chat_id": str(uuid.uuid4()),
        "seq": "1",
        "file_id": str(uuid.uuid4()),
    }
    checked = []
    with shared_api.http(token=token) as http:
        # Bob's own conversation, and the conflict he gets choosing its id with other fields:
        # choosing alice's id must get the same, whose it is never said.
        mine = str(uuid.uuid4())
        assert http.post("/v1/conversations", json={"id": mine, "tools": ["add"]}).is_success
        conflict = assert_problem(
            http.post("/v1/conversations", json={"id": mine}), 409, "conversation_conflict"
        )
        bobs_rows = owner_rows(shared_api.database_url, bob)
        spec = http.get("/openapi.json").json()
        for method, path, operation in operations(spec):
            where = f"{method.upper()} {path}"
            response = call(http, method, path, operation=operation, alice=alice, ids=hers)
            text = response.text
            assert alice.secret not in text, f"{where} showed bob alice's data: {text}"
            assert alice.name not in text, f"{where} named alice: {text}"
            names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
            if path.startswith("/v1/admin/"):
                _no_such_route(response, method, path.format(**hers))
            elif names and names[0] in AS_NEVER_USED:
                nobody = call(http, method, path, operation=operation, alice=alice, ids=nobodys)
                assert response.status_code == nobody.status_code < 300, f"{where}: {text}"
                assert text.replace(alice.conversation, "?") == nobody.text.replace(
                    nobodys["chat_id"], "?"
                ), where
            elif names:
                # Exactly what an id nobody has gets, but for the ids themselves.
                assert response.status_code == 404, f"{where}: {response.status_code} {text}"
                problem = _not_found(response, NOT_FOUND[names[0]])
                nobody = call(http, method, path, operation=operation, alice=alice, ids=nobodys)
                assert _without(problem, hers) == _without(
                    _not_found(nobody, NOT_FOUND[names[0]]), nobodys
                ), where
                named = {hers[name] for name in names}
                others = [v for k, v in hers.items() if k not in (*names, "seq") and v not in named]
                assert not any(other in text for other in others), f"{where} leaked: {text}"
            else:
                assert (method, path) in WITHOUT_ID, f"{where}: teach this test what bob may get"
                assert response.status_code == WITHOUT_ID[method, path], f"{where}: {text}"
                if path == "/v1/responses":  # as a conversation nobody has: the id he sent
                    body = BODIES[method, path](alice) | {
                        "conversation": nobodys["conversation_id"]
                    }
                    nobody = http.post(path, json=body)
                    assert text.replace(alice.conversation, "?") == nobody.text.replace(
                        nobodys["conversation_id"], "?"
                    ), where
                elif response.status_code == 409:  # the id bob sent, and nothing more
                    problem = assert_problem(response, 409, "conversation_conflict")
                    expected = _without(conflict, {"id": mine}) | {"instance": path}
                    assert _without(problem, hers) == expected, where
                else:
                    assert alice.conversation not in text and alice.turn not in text, where
            checked.append(where)

        listed = http.get("/v1/conversations").json()
        assert [c["id"] for c in listed["data"]] == [mine]
    assert len(checked) >= 12  # every route of the document, the stream included
    assert alice_state(shared_api, alice) == before  # untouched: still running, not cancelled
    assert owner_rows(shared_api.database_url, bob) == bobs_rows


def _no_such_route(response: httpx.Response, method: str, path: str) -> None:
    """An operator's route, to an owner: the 404 of a route that does not exist."""
    problem = assert_problem(response, 404, "not_found")
    assert problem["detail"] == f"no route {method.upper()} {path}", problem


def _not_found(response: httpx.Response, code: str) -> dict[str, Any]:
    """The 404's body: a problem, or on `/v1/responses` OpenAI's error object."""
    if response.request.url.path.startswith("/v1/responses"):
        error: dict[str, Any] = response.json()["error"]
        assert error["code"] == code, error
        return error
    return assert_problem(response, 404, code)


def _without(problem: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """The problem with the ids the request named taken out of its text."""
    found = {}
    for name, value in problem.items():
        text = value
        if isinstance(text, str):
            for key, given in ids.items():
                if key != "seq":  # (a message's seq is the same number whoever asks)
                    text = text.replace(given, "<id>")
        found[name] = text
    return found


def test_a_jwt_for_alice_is_alice_and_sees_what_her_api_key_made(
    shared_api: Deployment, alice: Alice
) -> None:
    with shared_api.http(token=jwt_for(alice.name)) as http:
        conversation = http.get(f"/v1/conversations/{alice.conversation}")
        assert conversation.status_code == 200, conversation.text
        assert conversation.json()["messages"][0]["content"] == f"my {alice.secret}"
        assert http.get(f"/v1/turns/{alice.turn}").json()["status"] == "running"
        listed = http.get("/v1/conversations").json()["data"]
        assert alice.conversation in [c["id"] for c in listed]
        made = http.post("/v1/conversations", json={"instructions": "by jwt"}).json()["id"]
    with shared_api.http(token=alice.key) as http:
        assert http.get(f"/v1/conversations/{made}").json()["instructions"] == "by jwt"
    with shared_api.http(token=jwt_for(f"not-{alice.name}")) as http:
        assert_problem(
            http.get(f"/v1/conversations/{alice.conversation}"), 404, "conversation_not_found"
        )


def test_auth_none_sees_every_conversation_and_makes_unowned_ones(
    shared_api: Deployment, alice: Alice
) -> None:
    open_api = shared_api.start_api(CHATWORKER_API_AUTH="none")
    with shared_api.http(open_api) as anyone:
        conversation = anyone.get(f"/v1/conversations/{alice.conversation}")
        assert conversation.status_code == 200, conversation.text
        assert conversation.json()["instructions"] == f"Remember {alice.secret}."
        assert anyone.get(f"/v1/turns/{alice.turn}").json()["status"] == "running"
        listed = [c["id"] for c in anyone.get("/v1/conversations?limit=100").json()["data"]]
        assert alice.conversation in listed
        unowned = anyone.post("/v1/conversations", json={}).json()["id"]
        assert unowned in [c["id"] for c in anyone.get("/v1/conversations").json()["data"]]
        assert anyone.get("/v1/tools").status_code == 200
    with shared_api.http(token=alice.key) as http:  # an unowned conversation is no one's
        assert_problem(http.get(f"/v1/conversations/{unowned}"), 404, "conversation_not_found")
        assert unowned not in [c["id"] for c in http.get("/v1/conversations").json()["data"]]
    open_api.stop()
