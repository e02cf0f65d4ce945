"""Bad requests over real HTTP: each is refused with its documented status and `code` as an
`application/problem+json` (`type`, `title`, `status`, `code`, `detail`), and writes nothing (the
owner's conversations, turns, messages, events and keys are counted before and after).

The table comes first; `{conversation}` and `{turn}` in a path are the owner's (a conversation
with a finished turn), `{unknown}` a UUID nobody has. `auth` names the credentials sent (see
`credentials`): the owner's API key unless it says otherwise. One test runs the whole table (the
module's deployment is started once even when pytest-xdist spreads tests over its workers) and
reports every case that fails, by its id.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest

from tests.api.conftest import (
    JWT_SECRET,
    Deployment,
    assert_problem,
    finished_turn,
    owner_name,
    owner_rows,
)

# One deployment for the module: its tests stay on one test process (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("api-bad_inputs")

MAX_MESSAGE_CHARS = 2000
MAX_FILE_BYTES = 1000
API_ENV = {
    "CHATWORKER_MAX_MESSAGE_CHARS": str(MAX_MESSAGE_CHARS),
    "CHATWORKER_MAX_FILE_BYTES": str(MAX_FILE_BYTES),
    "CHATWORKER_MAX_MESSAGE_FILE_BYTES": str(MAX_FILE_BYTES),
    "CHATWORKER_MAX_MESSAGE_FILES": "1",
    "CHATWORKER_OWNER_STORAGE_BYTES": "600",
}
# The body limits (app/api/gate.py): a route's, `CHATWORKER_API_MAX_BODY_BYTES` (1 MiB); the
# routes files go to add a message's files in base64, with 1,000 bytes each around them.
SMALL_LIMIT = 1_048_576
FILES_LIMIT = SMALL_LIMIT + MAX_FILE_BYTES * 4 // 3 + 1_000
TOO_MANY_VALUES = b'{"context": {"x": [' + b"0," * 250_000 + b"0]}}"  # (250,001 values, 500 KB)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()
USED_KEY = "the-key-of-the-first-message"


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    status: int
    code: str
    json: Any = None
    content: bytes | None = None
    chunked: bool = False  # send `content` without a Content-Length
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    auth: str = "key"


CONVERSATIONS = "/v1/conversations"
MESSAGES = "/v1/conversations/{conversation}/messages"
EVENTS = "/v1/conversations/{conversation}/events"
STREAM = "/v1/conversations/{conversation}/stream"
JSON = {"Content-Type": "application/json"}


def nested(levels: int) -> dict[str, Any]:
    """A schema of an object `levels` objects deep (twice as many levels of JSON)."""
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def with_pattern(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}


REF_LOOP = {
    "type": "object",
    "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}},
    "$ref": "#/$defs/a",
}
HI = {"text": "hi"}

CASES = [
    # --- bodies that are not what the route takes
    Case("malformed json", "POST", CONVERSATIONS, 400, "malformed_json",
         content=b'{"tools": [', headers=JSON),
    Case("malformed json message", "POST", MESSAGES, 400, "malformed_json",
         content=b'{"text": "hi"', headers=JSON),
    Case("json not in utf-8", "POST", MESSAGES, 400, "malformed_json",
         content=b'{"text": "\xff\xfe"}', headers=JSON),
    Case("json of another type", "POST", CONVERSATIONS, 422, "validation_failed", json=[]),
    Case("wrong type tools", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"tools": "add"}),
    Case("wrong type context", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"context": ["a"]}),
    Case("wrong type text", "POST", MESSAGES, 422, "validation_failed", json={"text": 5}),
    Case("missing text", "POST", MESSAGES, 422, "validation_failed", json={}),
    Case("no body", "POST", MESSAGES, 422, "validation_failed"),
    Case("unknown field", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"tool": ["add"]}),
    Case("unknown field message", "POST", MESSAGES, 422, "validation_failed",
         json={"text": "hi", "stream": True}),
    Case("unknown tool_choice", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"tool_choice": "sometimes"}),
    Case("malformed chosen id", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"id": "not-a-uuid"}),
    Case("unknown on_busy", "POST", MESSAGES, 422, "validation_failed",
         json={"text": "hi", "on_busy": "later"}),
    Case("unknown tool", "POST", CONVERSATIONS, 400, "unknown_tool",
         json={"tools": ["add", "no_such_tool"]}),
    Case("empty message", "POST", MESSAGES, 400, "invalid_message", json={"text": ""}),
    Case("nul in message", "POST", MESSAGES, 400, "invalid_message", json={"text": "a\x00b"}),
    Case("lone surrogate in message", "POST", MESSAGES, 400, "invalid_message",
         content=b'{"text": "a\\ud97ab"}', headers=JSON),
    Case("nul in a context key", "POST", CONVERSATIONS, 400, "invalid_request",
         json={"context": {"a\x00": 1}}),
    Case("lone surrogate in context", "POST", CONVERSATIONS, 400, "invalid_request",
         content=b'{"context": {"a": "\\ud97a"}}', headers=JSON),
    Case("client tool named like a built-in", "POST", CONVERSATIONS, 400, "invalid_request",
         json={"client_tools": [{"name": "agent_clarify"}]}),
    Case("client tool with a bad schema", "POST", CONVERSATIONS, 400, "invalid_request",
         json={"client_tools": [{"name": "t", "parameters": {"type": "object",
                                                           "required": "a"}}]}),
    Case("client tool with an unknown field", "POST", CONVERSATIONS, 422, "validation_failed",
         json={"client_tools": [{"name": "t", "run": "now"}]}),
    Case("actions of an unknown turn", "POST", "/v1/turns/{unknown}/actions", 404,
         "turn_not_found", json={"outputs": [{"call_id": "c", "output": "x"}]}),
    Case("actions the turn never waited for", "POST", "/v1/turns/{turn}/actions", 404,
         "action_not_found", json={"outputs": [{"call_id": "c", "output": "x"}]}),
    Case("an action answered with an output and an approval", "POST",
         "/v1/turns/{turn}/actions", 422, "validation_failed",
         json={"outputs": [{"call_id": "c", "output": "x", "approve": True}]}),
    Case("an approval that is not a boolean", "POST", "/v1/turns/{turn}/actions", 422,
         "validation_failed", json={"outputs": [{"call_id": "c", "approve": "yes"}]}),
    Case("actions without outputs", "POST", "/v1/turns/{turn}/actions", 422,
         "validation_failed", json={"outputs": []}),
    Case("actions answering one call twice", "POST", "/v1/turns/{turn}/actions", 400,
         "invalid_request", json={"outputs": [{"call_id": "c", "output": "x"},
                                              {"call_id": "c", "output": "y"}]}),
    Case("message too large", "POST", MESSAGES, 413, "message_too_large",
         json={"text": "x" * (MAX_MESSAGE_CHARS + 1)}),
    Case("request too large", "POST", MESSAGES, 413, "request_too_large",
         content=json.dumps({"text": "x" * FILES_LIMIT}).encode(), headers=JSON),
    Case("request too large chunked", "POST", MESSAGES, 413, "request_too_large",
         content=json.dumps({"text": "x" * FILES_LIMIT}).encode(), headers=JSON, chunked=True),
    Case("a body over a route that takes no files", "POST", CONVERSATIONS, 413,
         "request_too_large", content=json.dumps({"context": {"x": "y" * SMALL_LIMIT}}).encode(),
         headers=JSON),
    Case("a body over a route that takes no files chunked", "POST", CONVERSATIONS, 413,
         "request_too_large", content=json.dumps({"context": {"x": "y" * SMALL_LIMIT}}).encode(),
         headers=JSON, chunked=True),
    Case("json of more values than any request needs", "POST", CONVERSATIONS, 413,
         "request_too_large", content=TOO_MANY_VALUES, headers=JSON),
    Case("json of more values than any request needs to a message", "POST", MESSAGES, 413,
         "request_too_large", content=b'{"text": "hi", "output_schema": ' + TOO_MANY_VALUES + b"}",
         headers=JSON),
    Case("json nested too deeply", "POST", CONVERSATIONS, 413, "request_too_large",
         content=b"[" * 100_000 + b"]" * 100_000, headers=JSON),
    Case("file larger than the cap", "POST", MESSAGES, 413, "file_too_large",
         json={"text": "x", "files": [{"data": base64.b64encode(b"y" * 1001).decode()}]}),
    Case("two files, one allowed", "POST", MESSAGES, 400, "invalid_file",
         json={"text": "x", "files": [{"data": PDF}, {"data": PDF}]}),
    Case("a media type the bytes belie", "POST", MESSAGES, 400, "invalid_file",
         json={"text": "x", "files": [{"data": PDF, "media_type": "image/png"}]}),
    Case("a name its bytes belie", "POST", MESSAGES, 400, "invalid_file",
         json={"text": "x", "files": [{"name": "photo.png", "data": PDF}]}),
    Case("a file larger than the owner's storage quota", "POST", MESSAGES, 413,
         "larger_than_storage_quota",
         json={"text": "x", "files": [{"data": base64.b64encode(b"z" * 700).decode()}]}),
    Case("a file reference as a file", "POST", MESSAGES, 400, "invalid_file",
         json={"text": "x", "files": [{"data": f"chatworker-file:{uuid.UUID(int=1)}"}]}),
    Case("a file that is not base64", "POST", MESSAGES, 400, "invalid_file",
         json={"text": "x", "files": [{"data": "%%%"}]}),
    Case("an image to a text-only model", "POST", MESSAGES, 400, "file_not_taken",
         json={"text": "x", "files": [{"data": PNG}]}),
    Case("an output schema that is no schema", "POST", MESSAGES, 400, "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": {"type": "object", "required": 3}}}),
    Case("an output schema repeating a pattern 2^32 times", "POST", MESSAGES, 400,
         "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": with_pattern("a{4294967296}")}}),
    Case("an output schema with a lookahead (RE2 runs patterns)", "POST", MESSAGES, 400,
         "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": with_pattern("(?=a)a")}}),
    Case("an output schema 120 objects deep", "POST", MESSAGES, 400, "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": nested(120)}}),
    Case("an output schema whose $ref loops", "POST", MESSAGES, 400, "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": REF_LOOP}}),
    Case("an output schema whose $ref points to nothing", "POST", MESSAGES, 400,
         "invalid_output_schema",
         json={"text": "x", "output_schema": {"schema": {"type": "object", "$ref": "#/$defs/x"}}}),
    Case("client tool parameters 300 objects deep", "POST", CONVERSATIONS, 400,
         "invalid_request", json={"client_tools": [{"name": "t", "parameters": nested(300)}]}),
    Case("client tool parameters with a pattern RE2 cannot run", "POST", CONVERSATIONS, 400,
         "invalid_request",
         json={"client_tools": [{"name": "t", "parameters": with_pattern("(a)\\1")}]}),
    Case("client tool parameters whose $ref loops", "POST", CONVERSATIONS, 400,
         "invalid_request", json={"client_tools": [{"name": "t", "parameters": REF_LOOP}]}),
    Case("idempotency key reused", "POST", MESSAGES, 422, "idempotency_key_reused",
         json={"text": "another text"}, headers={"Idempotency-Key": USED_KEY}),
    Case("text/plain body", "POST", MESSAGES, 415, "unsupported_media_type",
         content=b'{"text": "hi"}', headers={"Content-Type": "text/plain"}),
    Case("form body", "POST", CONVERSATIONS, 415, "unsupported_media_type",
         content=b"tools=add", headers={"Content-Type": "application/x-www-form-urlencoded"}),
    Case("body without a content type", "POST", MESSAGES, 415, "unsupported_media_type",
         content=b'{"text": "hi"}'),
    # --- ids, cursors and query parameters
    Case("unknown conversation", "GET", "/v1/conversations/{unknown}", 404,
         "conversation_not_found"),
    Case("message to unknown conversation", "POST", "/v1/conversations/{unknown}/messages",
         404, "conversation_not_found", json=HI),
    Case("delete unknown conversation", "DELETE", "/v1/conversations/{unknown}", 404,
         "conversation_not_found"),
    Case("events of unknown conversation", "GET", "/v1/conversations/{unknown}/events", 404,
         "conversation_not_found"),
    Case("stream of unknown conversation", "GET", "/v1/conversations/{unknown}/stream", 404,
         "conversation_not_found"),
    Case("retry unknown conversation", "POST", "/v1/conversations/{unknown}/retry", 404,
         "conversation_not_found"),
    Case("cancel unknown conversation", "POST", "/v1/conversations/{unknown}/cancel", 404,
         "conversation_not_found"),
    Case("unknown turn", "GET", "/v1/turns/{unknown}", 404, "turn_not_found"),
    Case("cancel unknown turn", "POST", "/v1/turns/{unknown}/cancel", 404, "turn_not_found"),
    Case("malformed conversation id", "GET", "/v1/conversations/not-a-uuid", 422,
         "validation_failed"),
    Case("malformed conversation id message", "POST", "/v1/conversations/123/messages", 422,
         "validation_failed", json=HI),
    Case("malformed turn id", "POST", "/v1/turns/not-a-uuid/cancel", 422, "validation_failed"),
    Case("negative after", "GET", EVENTS, 400, "invalid_cursor", params={"after": "-1"}),
    Case("after past the end", "GET", EVENTS, 400, "invalid_cursor",
         params={"after": "1000000"}),
    Case("after not a number", "GET", EVENTS, 422, "validation_failed", params={"after": "x"}),
    Case("events limit 0", "GET", EVENTS, 422, "validation_failed", params={"limit": "0"}),
    Case("negative wait", "GET", EVENTS, 422, "validation_failed", params={"wait": "-1"}),
    Case("stream negative after", "GET", STREAM, 400, "invalid_cursor", params={"after": "-1"}),
    Case("stream malformed Last-Event-ID", "GET", STREAM, 400, "invalid_cursor",
         headers={"Last-Event-ID": "yesterday"}),
    Case("stream Last-Event-ID past the end", "GET", STREAM, 400, "invalid_cursor",
         headers={"Last-Event-ID": "1000000"}),
    Case("stream malformed delta Last-Event-ID", "GET", STREAM, 400, "invalid_cursor",
         headers={"Last-Event-ID": "1:0::-1"}),
    Case("stream unknown until", "GET", STREAM, 422, "validation_failed",
         params={"until": "later"}),
    Case("list limit too large", "GET", CONVERSATIONS, 422, "validation_failed",
         params={"limit": "101"}),
    Case("list malformed before", "GET", CONVERSATIONS, 422, "validation_failed",
         params={"before": "yesterday"}),
    Case("after_seq beyond any seq", "GET", "/v1/conversations/{conversation}", 422,
         "validation_failed", params={"after_seq": str(2**40)}),
    Case("wait not a boolean", "POST", MESSAGES, 422, "validation_failed", json=HI,
         params={"wait": "maybe"}),
    Case("retry of a conversation that did not fail", "POST",
         "/v1/conversations/{conversation}/retry", 409, "not_retryable"),
    Case("no such route", "GET", "/v1/nothing", 404, "not_found"),
    Case("method not allowed", "PUT", "/v1/conversations/{conversation}", 405,
         "method_not_allowed", json=HI),
    # --- credentials (on a write: a message to the owner's conversation)
    Case("no credentials", "POST", MESSAGES, 401, "unauthenticated", json=HI, auth="none"),
    Case("not a bearer", "POST", MESSAGES, 401, "unauthenticated", json=HI, auth="basic"),
    Case("empty bearer", "POST", MESSAGES, 401, "unauthenticated", json=HI,
         auth="empty bearer"),
    Case("bad token", "POST", MESSAGES, 401, "invalid_token", json=HI, auth="garbage token"),
    Case("expired jwt", "POST", MESSAGES, 401, "token_expired", json=HI, auth="expired jwt"),
    Case("jwt badly signed", "POST", MESSAGES, 401, "invalid_token", json=HI,
         auth="jwt badly signed"),
    Case("jwt without exp", "POST", MESSAGES, 401, "invalid_token", json=HI,
         auth="jwt without exp"),
    Case("jwt without sub", "POST", MESSAGES, 401, "invalid_token", json=HI,
         auth="jwt without sub"),
    Case("jwt with alg none", "POST", MESSAGES, 401, "invalid_token", json=HI,
         auth="jwt alg none"),
    Case("revoked api key", "POST", MESSAGES, 401, "api_key_revoked", json=HI,
         auth="revoked key"),
    Case("unknown api key", "POST", MESSAGES, 401, "invalid_api_key", json=HI,
         auth="unknown key"),
    Case("api key of no key id", "POST", MESSAGES, 401, "invalid_api_key", json=HI,
         auth="unknown key id"),
    Case("malformed api key", "POST", MESSAGES, 401, "invalid_api_key", json=HI,
         auth="malformed key"),
    Case("X-API-Key not a key", "POST", MESSAGES, 401, "invalid_api_key", json=HI,
         auth="x-api-key garbage"),
    Case("revoked key on a read", "GET", "/v1/conversations/{conversation}", 401,
         "api_key_revoked", auth="revoked key"),
    Case("no credentials to delete", "DELETE", "/v1/conversations/{conversation}", 401,
         "unauthenticated", auth="none"),
    Case("no credentials to create", "POST", CONVERSATIONS, 401, "unauthenticated", json={},
         auth="none"),
    Case("bad token to list tools", "GET", "/v1/tools", 401, "invalid_token",
         auth="garbage token"),
    # --- the caller before the body: a body is not read for a caller who is not known
    Case("no credentials and malformed json", "POST", MESSAGES, 401, "unauthenticated",
         content=b'{"text": "hi"', headers=JSON, auth="none"),
    Case("no credentials and json of too many values", "POST", CONVERSATIONS, 401,
         "unauthenticated", content=TOO_MANY_VALUES, headers=JSON, auth="none"),
    Case("no credentials and a body over the route's limit", "POST", CONVERSATIONS, 401,
         "unauthenticated", content=b"x" * (SMALL_LIMIT + 1_000), headers=JSON, auth="none"),
    Case("bad token and a form body", "POST", CONVERSATIONS, 401, "invalid_token",
         content=b"tools=add", headers={"Content-Type": "application/x-www-form-urlencoded"},
         auth="garbage token"),
]  # fmt: skip


@dataclass
class Owner:
    name: str
    key: str
    conversation: str
    turn: str
    credentials: dict[str, dict[str, str]]


def token(claims: dict[str, Any], secret: str = JWT_SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


@pytest.fixture(scope="module")
def owner(shared_api: Deployment) -> Owner:
    """An owner with a conversation whose first turn (keyed `USED_KEY`) has completed, and every
    kind of credentials, good and bad."""
    name = owner_name("bad-inputs")
    key = shared_api.key(name)
    revoked_view, revoked = shared_api.client.admin.create_key(name)
    shared_api.client.admin.revoke_key(revoked_view.id)
    other_view, other = shared_api.client.admin.create_key(name)
    unknown = other[:-1] + ("y" if other.endswith("x") else "x")  # the secret is wrong
    now = int(time.time())
    with shared_api.http(token=key) as http:
        conversation = http.post(CONVERSATIONS, json={}).json()["id"]
        submitted = http.post(
            MESSAGES.format(conversation=conversation),
            json={"text": "the first message"},
            headers={"Idempotency-Key": USED_KEY},
        )
        assert submitted.status_code == 202, submitted.text
        turn = submitted.json()["turn"]["id"]
        assert finished_turn(http, turn)["status"] == "completed"

    def bearer(text: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {text}"}

    credentials = {
        "key": bearer(key),
        "none": {},
        "basic": {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        "empty bearer": {"Authorization": "Bearer"},
        "garbage token": bearer("not.a.token"),
        "expired jwt": bearer(token({"sub": name, "exp": now - 3600})),
        "jwt badly signed": bearer(
            token({"sub": name, "exp": now + 3600}, secret="another-secret-of-at-least-32-bytes!")
        ),
        "jwt without exp": bearer(token({"sub": name})),
        "jwt without sub": bearer(token({"exp": now + 3600})),
        "jwt alg none": bearer(jwt.encode({"sub": name, "exp": now + 3600}, "", algorithm="none")),
        "revoked key": bearer(revoked),
        "unknown key": bearer(unknown),
        "unknown key id": bearer(f"cwk_{uuid.uuid4().hex}_{other.split('_', 2)[2]}"),
        "malformed key": bearer("cwk_not-a-key"),
        "x-api-key garbage": {"X-API-Key": "garbage", **bearer(key)},
    }
    assert other_view.owner == name
    return Owner(name, key, conversation, turn, credentials)


@pytest.fixture(scope="module")
def http(shared_api: Deployment) -> Iterator[httpx.Client]:
    with shared_api.http() as client:
        yield client


def test_every_bad_request_of_the_table_is_refused_with_its_problem_and_writes_nothing(
    owner: Owner, http: httpx.Client, shared_api: Deployment
) -> None:
    spec = http.get("/openapi.json").json()
    failures = []
    for case in CASES:
        try:
            check(case, owner, http, shared_api)
            check_documented(case, spec)
        except AssertionError as exc:
            failures.append(f"{case.id}: {exc}")
    assert failures == [], "\n".join(failures)
    assert len({case.id for case in CASES}) == len(CASES)


def check(case: Case, owner: Owner, http: httpx.Client, shared_api: Deployment) -> None:
    path = case.path.format(conversation=owner.conversation, turn=owner.turn, unknown=uuid.uuid4())
    headers = {**owner.credentials[case.auth], **case.headers}
    before = owner_rows(shared_api.database_url, owner.name)
    conversation_before = _conversation(http, owner)

    content: Any = case.content
    if case.chunked:
        assert case.content is not None
        body = case.content
        content = iter([body[i : i + 16384] for i in range(0, len(body), 16384)])
    response = http.request(
        case.method,
        path,
        json=case.json,
        content=content,
        headers=headers,
        params=case.params,
        timeout=10,
    )

    problem = assert_problem(response, case.status, case.code)
    assert problem["instance"] == path
    if case.status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    if case.code == "validation_failed":
        assert problem["errors"], problem
        assert all(error["loc"] and error["msg"] for error in problem["errors"])
    assert owner_rows(shared_api.database_url, owner.name) == before
    assert _conversation(http, owner) == conversation_before


def _conversation(http: httpx.Client, owner: Owner) -> Any:
    response = http.get(f"/v1/conversations/{owner.conversation}", headers=owner.credentials["key"])
    assert response.status_code == 200, response.text
    return response.json()


def check_documented(case: Case, spec: dict[str, Any]) -> None:
    """The case's status is one its operation documents in the OpenAPI document (or one any
    request may get: 404 for no route, 405, 413 for any body, 422 for a malformed path)."""
    template = case.path.replace("{conversation}", "{conversation_id}")
    template = template.replace(
        "{unknown}", "{turn_id}" if "/turns/" in template else "{conversation_id}"
    ).replace("{turn}", "{turn_id}")
    operation = spec["paths"].get(template, {}).get(case.method.lower())
    if operation is None:
        assert case.code in ("not_found", "method_not_allowed", "validation_failed"), template
        return
    documented = operation["responses"].keys()
    assert case.status == 413 or str(case.status) in documented, f"undocumented {case.status}"
