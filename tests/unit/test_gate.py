"""Each route's request taken in order (`app/api/gate.py`), on the app in process: the caller
before a byte of the body (the body's chunks counted as the app pulls them), the route's own
limit, and the OpenAPI document stating every operation's limit (a new route has one the day
it exists)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api import create_app
from app.api.gate import body_limits
from app.config import load_settings

FILE_ROUTES = {
    ("post", "/v1/conversations/{conversation_id}/messages"),
    ("post", "/v1/responses"),
    ("post", "/v1/ai-sdk/chat"),
    ("post", "/v1/chat/completions"),
}


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(load_settings(database_url="sqlite:///:memory:", api_auth="api_key"))


def send(app: FastAPI, path: str, chunks: int, headers: dict[str, str]) -> tuple[int, Any, int]:
    """POST `chunks` chunks of 64 KiB as a chunked body: the status, the answer, and how many
    chunks the app pulled."""
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(chunks):
            pulled += 1
            yield b" " * 65536

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post(path, content=body(), headers=headers)

    answer = asyncio.run(main())
    return answer.status_code, answer.json(), pulled


@pytest.mark.parametrize(
    "path",
    ["/v1/conversations", "/v1/conversations/8d4f3d52-0000-4000-8000-000000000000/messages",
     "/v1/responses", "/v1/ai-sdk/chat", "/v1/chat/completions", "/v1/webhooks"],
)  # fmt: skip
def test_no_caller_is_refused_before_a_byte_of_the_body_is_read(app: FastAPI, path: str) -> None:
    status, answer, pulled = send(app, path, 100, {"Content-Type": "application/json"})
    assert status == 401, answer
    assert pulled == 0


def test_a_content_length_over_the_route_s_limit_is_refused_before_the_body_is_read() -> None:
    app = create_app(load_settings(database_url="sqlite:///:memory:", api_auth="none"))
    limit = body_limits(app.state.chatworker.settings)["small"]

    async def main() -> tuple[httpx.Response, int]:
        pulled = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal pulled
            pulled += 1
            yield b"{}"

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            headers = {"Content-Type": "application/json", "Content-Length": str(limit + 1)}
            refused = await http.post("/v1/conversations", content=body(), headers=headers)
        return refused, pulled

    refused, pulled = asyncio.run(main())
    assert refused.status_code == 413 and refused.json()["code"] == "request_too_large"
    assert pulled == 0


def test_a_chunked_body_is_refused_as_it_streams_past_the_route_s_limit() -> None:
    app = create_app(load_settings(database_url="sqlite:///:memory:", api_auth="none"))
    limit = body_limits(app.state.chatworker.settings)["small"]
    chunks = limit // 65536 + 10
    status, answer, pulled = send(app, "/v1/conversations", chunks, {})
    assert (status, answer["code"]) == (413, "request_too_large"), answer
    assert pulled == limit // 65536 + 1  # the chunk that went past it, and no more


def test_every_operation_states_its_limit_and_only_the_routes_files_go_to_take_them(
    app: FastAPI,
) -> None:
    answers = ("post", "/v1/turns/{turn_id}/actions")
    limits = body_limits(app.state.chatworker.settings)
    stated = {
        (method, path): operation.get("x-max-body-bytes")
        for path, item in app.openapi()["paths"].items()
        for method, operation in item.items()
    }
    assert len(stated) > 30
    assert {key for key, limit in stated.items() if limit == limits["files"]} == FILE_ROUTES
    assert stated[answers] == limits["outputs"]
    others = {limit for key, limit in stated.items() if key not in {*FILE_ROUTES, answers}}
    assert others == {limits["small"]}


def test_the_small_limit_holds_a_message_s_text_escaped_and_the_files_limit_its_files() -> None:
    settings = load_settings(database_url="sqlite:///:memory:")
    assert body_limits(settings) == {
        "small": 1_048_576,
        "files": 1_048_576 + 26_676_666,
        "outputs": 1_048_576 + 128 * 100_000,  # (the most outputs an answer takes, each full)
    }
    larger = load_settings(database_url="sqlite:///:memory:", max_message_chars=1_000_000)
    assert body_limits(larger)["small"] == 6_000_000 + 65_536
    smaller = load_settings(database_url="sqlite:///:memory:", api_max_body_bytes=100_000)
    assert body_limits(smaller)["small"] == 665_536  # (a message's text of 100,000 escaped)
