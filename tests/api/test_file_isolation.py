"""Another owner's file never reaches a model, through any dialect, over real HTTP against a
real API process and worker: Bob names Alice's file (by the id her message shows, by the id it
is stored under, or by no id at all) as the text of his message, or as one of its file parts, in
our own API (`POST /v1/conversations/{id}/messages`), OpenAI's Responses dialect
(`/v1/responses`: `input_text`, `input_file`, `input_image`) and the AI SDK's
(`/v1/ai-sdk/chat`: `text` and `file` parts). Text is sent to the model as text and the turn
completes; a file part that is not the file's bytes is refused with a clear 4xx and writes
nothing. Every request the fake model received is searched for Alice's bytes. The owner's
storage quota answers 413 or 429 with its code, writing nothing.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from app.testing import services
from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import Deployment, assert_problem, finished_turn, owner_name, owner_rows
from tests.integration.test_files import png

# One deployment for the module: its tests stay on one test process (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("api-file-isolation")

QUOTA = 300_000
API_ENV = {"CHATWORKER_OWNER_STORAGE_BYTES": str(QUOTA)}
MODEL = "openai/gpt-4o-mini"
SECRET = "alice's notes: the vault code is 4711"
PICTURE = png(seed=91)


@dataclass(frozen=True)
class Alice:
    shown: str  # the id her message shows (GET /v1/files/{id})
    stored: str  # the id her notes' bytes are stored under (what the worker reads)


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def alice(shared_api: Deployment) -> Alice:
    name = owner_name("alice")
    with shared_api.http(token=shared_api.key(name)) as http:
        conversation = http.post("/v1/conversations", json={"model": MODEL}).json()["id"]
        files = [
            {"name": "notes.txt", "data": data_url("text/plain", SECRET.encode())},
            {"name": "picture.png", "data": data_url("image/png", PICTURE)},
        ]
        sent = http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"text": "keep these", "files": files},
            params={"wait": "true"},
        )
        assert sent.status_code == 200, sent.text
        notes = sent.json()["messages"][0]["files"][0]
    with psycopg.connect(services.libpq_dsn(shared_api.database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT id FROM files WHERE owner = %s AND size = %s", (name, len(SECRET))
        ).fetchone()
    assert row is not None
    return Alice(notes["id"], str(row[0]))


@pytest.fixture
def bob(shared_api: Deployment) -> Iterator[tuple[str, httpx.Client]]:
    name = owner_name("bob")
    with shared_api.http(token=shared_api.key(name)) as http:
        yield name, http


def targets(alice: Alice) -> list[str]:
    return [alice.shown, alice.stored, "not-a-uuid"]


def assert_no_leak(fake_llm: FakeLLMServer) -> None:
    """No request the fake model received, but Alice's own, carried her bytes."""
    picture = base64.b64encode(PICTURE).decode()
    for request in fake_llm.requests():
        text = json.dumps(request["body"])
        if "keep these" in text:
            continue
        assert SECRET not in text and picture not in text, text[:500]


def sent_text(fake_llm: FakeLLMServer, token: str) -> list[str]:
    """The text parts of the last user message of the request holding `token`."""
    (request,) = fake_llm.requests(match=token)
    content = request["body"]["messages"][-1]["content"]
    return [part["text"] for part in content if part["type"] == "text"]


# --- the reference as text, through each dialect: sent as text, the turn completes ---------------


def test_our_api_sends_text_that_names_another_owner_s_file_as_text(
    alice: Alice, bob: tuple[str, httpx.Client], fake_llm: FakeLLMServer
) -> None:
    _, http = bob
    for target in targets(alice):
        token = uuid.uuid4().hex
        fake_llm.script([{"text": "Noted."}], match=token)
        conversation = http.post("/v1/conversations", json={"model": MODEL}).json()["id"]
        text = f"chatworker-file:{target}"
        mine = {"name": "mine.txt", "data": data_url("text/plain", token.encode())}
        sent = http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"text": text, "files": [mine]},
            params={"wait": "true"},
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["turn"]["status"] == "completed", sent.json()
        assert sent_text(fake_llm, token) == [text, f"[file mine.txt]\n{token}"]
    assert_no_leak(fake_llm)


def test_the_responses_dialect_sends_text_that_names_another_owner_s_file_as_text(
    alice: Alice, bob: tuple[str, httpx.Client], fake_llm: FakeLLMServer
) -> None:
    _, http = bob
    for target in targets(alice):
        token = uuid.uuid4().hex
        fake_llm.script([{"text": "Noted."}], match=token)
        text = f"chatworker-file:{target}"
        content = [
            {"type": "input_text", "text": text},
            {
                "type": "input_file",
                "file_data": data_url("text/plain", token.encode()),
                "filename": "mine.txt",
            },
        ]
        sent = http.post(
            "/v1/responses", json={"model": MODEL, "input": [{"role": "user", "content": content}]}
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["status"] == "completed", sent.json()
        assert sent_text(fake_llm, token) == [text, f"[file mine.txt]\n{token}"]
    assert_no_leak(fake_llm)


def test_the_ai_sdk_dialect_sends_text_that_names_another_owner_s_file_as_text(
    alice: Alice, bob: tuple[str, httpx.Client], fake_llm: FakeLLMServer
) -> None:
    _, http = bob
    for target in targets(alice):
        token = uuid.uuid4().hex
        fake_llm.script([{"text": "Noted."}], match=token)
        text = f"chatworker-file:{target}"
        parts = [
            {"type": "text", "text": text},
            {
                "type": "file",
                "mediaType": "text/plain",
                "filename": "mine.txt",
                "url": data_url("text/plain", token.encode()),
            },
        ]
        body = {
            "id": f"chat-{token}",
            "model": MODEL,
            "messages": [{"id": token, "role": "user", "parts": parts}],
        }
        sent = http.post("/v1/ai-sdk/chat", json=body)
        assert sent.status_code == 200, sent.text
        assert '"type":"finish"' in sent.text.replace(" ", ""), sent.text[-500:]
        assert sent_text(fake_llm, token) == [text, f"[file mine.txt]\n{token}"]
    assert_no_leak(fake_llm)


# --- the reference as a file part: refused, nothing written ---------------------------------------


def test_a_file_part_naming_another_owner_s_file_is_refused_in_every_dialect(
    alice: Alice, bob: tuple[str, httpx.Client], fake_llm: FakeLLMServer, shared_api: Deployment
) -> None:
    name, http = bob
    conversation = http.post("/v1/conversations", json={"model": MODEL}).json()["id"]
    before = owner_rows(shared_api.database_url, name)
    messages = f"/v1/conversations/{conversation}/messages"
    refused: list[tuple[str, dict[str, Any]]] = []
    for target in targets(alice):
        reference = f"chatworker-file:{target}"
        # (a file of ours is its bytes: an id is a field no file has, 422 naming it)
        assert_problem(
            http.post(messages, json={"text": "look", "files": [{"id": target}]}),
            422,
            "validation_failed",
        )
        refused += [
            (messages, {"text": "look", "files": [{"data": reference}]}),
            (messages, {"text": "look", "files": [{"data": f"/v1/files/{target}"}]}),
        ]
        for part in (
            {"type": "input_file", "file_id": target},
            {"type": "input_file", "file_data": reference, "filename": "notes.txt"},
            {"type": "input_image", "image_url": reference, "detail": "auto"},
            {"type": "input_image", "image_url": f"/v1/files/{target}", "detail": "auto"},
        ):
            content = [{"type": "input_text", "text": "look"}, part]
            refused.append(
                ("/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": content}]})
            )
        for url in (reference, f"/v1/files/{target}"):
            parts = [
                {"type": "text", "text": "look"},
                {"type": "file", "mediaType": "text/plain", "filename": "notes.txt", "url": url},
            ]
            chat = {"id": f"chat-{uuid.uuid4().hex}", "model": MODEL}
            refused.append(
                (
                    "/v1/ai-sdk/chat",
                    {**chat, "messages": [{"id": "m", "role": "user", "parts": parts}]},
                )
            )
    for path, body in refused:
        response = http.post(path, json=body)
        assert response.status_code == 400, (path, body, response.text)
        if path == messages:
            assert_problem(response, 400, "invalid_file")
    assert owner_rows(shared_api.database_url, name) == before
    assert_no_leak(fake_llm)


def test_another_owner_s_file_is_not_found_by_either_of_its_ids(
    alice: Alice, bob: tuple[str, httpx.Client]
) -> None:
    _, http = bob
    for target in (alice.shown, alice.stored, str(uuid.uuid4())):
        assert_problem(http.get(f"/v1/files/{target}"), 404, "file_not_found")


# --- the storage quota ----------------------------------------------------------------------------


def test_the_storage_quota_answers_413_or_429_and_writes_nothing(
    shared_api: Deployment, fake_llm: FakeLLMServer
) -> None:
    name = owner_name("carol")
    with shared_api.http(token=shared_api.key(name)) as http:
        conversation = http.post("/v1/conversations", json={"model": MODEL}).json()["id"]
        messages = f"/v1/conversations/{conversation}/messages"

        def file(size: int, fill: bytes) -> dict[str, Any]:
            return {"text": "keep", "files": [{"data": data_url("text/plain", fill * size)}]}

        before = owner_rows(shared_api.database_url, name)
        too_large = http.post(messages, json=file(QUOTA + 1, b"a"))
        assert_problem(too_large, 413, "larger_than_storage_quota")
        assert owner_rows(shared_api.database_url, name) == before

        first = http.post(messages, json=file(200_000, b"b"), params={"wait": "true"})
        assert first.status_code == 200, first.text
        before = owner_rows(shared_api.database_url, name)
        past = http.post(messages, json=file(200_000, b"c"))
        problem = assert_problem(past, 429, "storage_quota_exceeded")
        assert "CHATWORKER_OWNER_STORAGE_BYTES" in problem["detail"]
        assert owner_rows(shared_api.database_url, name) == before

        big = "x" * 90_000  # (a message of text is not refused: its forks are)
        token = uuid.uuid4().hex
        fake_llm.script([{"text": "ok"}], match=token)
        other = http.post("/v1/conversations", json={"model": MODEL}).json()["id"]
        turn = http.post(f"/v1/conversations/{other}/messages", json={"text": f"{big} {token}"})
        assert finished_turn(http, turn.json()["turn"]["id"])["status"] == "completed"
        before = owner_rows(shared_api.database_url, name)
        fork = http.post(f"/v1/conversations/{other}/fork", json={})
        assert_problem(fork, 429, "storage_quota_exceeded")
        assert owner_rows(shared_api.database_url, name) == before
