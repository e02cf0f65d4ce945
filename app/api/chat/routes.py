"""`/v1/chat/completions` and `/v1/models`: OpenAI's Chat Completions over our durable turns,
for the clients and frameworks that speak it (LangChain's `ChatOpenAI`, LlamaIndex, Open WebUI,
the `openai` SDKs' `chat.completions`).

    POST /v1/chat/completions   a completion: the turn the request's history places
                                (`history.py`, `create.py`), waited for, or streamed as chunks
                                (`chunks.py`); the same request sent again is the same turn
    GET  /v1/models             the models this server runs conversations on

A request is one response of the Responses dialect (`ResponseId`) written as a completion: the
same turns, the same waits and streams. What Chat Completions cannot say is not offered here: a
stream resumed from a position (our SSE and /v1/responses do that; here the same request sent
again replays the answer), a response id (a conversation is found by its history), approvals of
a worker's tool calls. Errors are OpenAI's shape.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.concurrency import run_in_threadpool
from sse_starlette import ServerSentEvent

from app.api.auth import Authenticated
from app.api.chat import create
from app.api.chat.chunks import ChatChunks
from app.api.chat.completion import TurnFailed, completion
from app.api.chat.requests import ChatRequest, parse_chat
from app.api.gate import TAKES_FILES, GuardedRoute
from app.api.problems import speaks
from app.api.responses import lookup, sse
from app.api.responses.errors import Unsupported, documented_openai, openai_error
from app.api.responses.ids import ResponseId
from app.api.responses.objects import response_object
from app.api.state import Api
from app.client import TurnRecord

router = APIRouter(tags=["chat completions (OpenAI)"], route_class=GuardedRoute)


class StillRunning(Unsupported):
    """The turn did not rest within the server's longest wait: the same request waits again."""


speaks(
    "/v1/chat",
    openai_error,
    {TurnFailed: (502, "turn_failed"), StillRunning: (504, "turn_still_running")},
)
speaks("/v1/models", openai_error)

#: A completion waits this many of the server's longest waits for its turn to rest (the SDKs'
#: own timeout is 10 minutes), then answers 504: the same request sent again waits again.
WAITS = 5


@router.post(
    "/chat/completions",
    responses=documented_openai(400, 401, 408, 409, 413, 415, 422, 429, 502, 503, 504),
    openapi_extra=TAKES_FILES,
)
async def create_completion(
    caller: Authenticated, api: Api, body: Annotated[dict[str, Any], Body()]
) -> Any:
    """A chat completion: the turn the messages ask for (or the one their tool messages
    continue), once it ends or pauses for the client's tools; with `stream`, its chunks."""
    request = parse_chat(body)
    response = await run_in_threadpool(lambda: create.start(api, caller, request))
    if request.stream:
        return await sse.stream(
            api, caller, response, None, lambda record: _Chunks(request, response, record)
        )
    for _ in range(WAITS):
        record = await api.held(caller.owner, lambda: lookup.wait(api, caller, response))
        if lookup.rests(record):
            break
    else:
        raise StillRunning(
            f"the turn is still running after {WAITS * api.settings.api_max_wait_seconds:.0f} s: "
            "send the same request again to wait for its answer (it is not run twice)"
        )
    servers = await run_in_threadpool(lambda: lookup.servers_of(api))
    return completion(response_object(record, response, servers))


@router.get("/models", responses=documented_openai(401, 429, 503))
def list_models(caller: Authenticated, api: Api) -> dict[str, Any]:
    """The server's model and its fallbacks: those a conversation runs on unless told another
    (any model the workers' litellm can call is taken by name)."""
    model = api.settings.model
    names = [model, *(name for name in api.settings.fallback_models if name != model)]
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "chatworker"}
            for name in names
        ],
    }


class _Chunks:
    """The response's events as chunks, each a server-sent event, `[DONE]` after the last."""

    def __init__(self, request: ChatRequest, response: ResponseId, record: TurnRecord) -> None:
        model = record.turn.model or record.conversation.model
        created = int(record.turn.created_at.timestamp())
        self.chunks = ChatChunks(str(response), model, created, request.include_usage)

    @property
    def ended(self) -> bool:
        return self.chunks.ended

    def __call__(self, events: list[dict[str, Any]]) -> list[ServerSentEvent]:
        if self.chunks.ended:
            return []
        out = [
            ServerSentEvent(data=json.dumps(chunk))
            for event in events
            for chunk in self.chunks.feed(event)
        ]
        if self.chunks.ended:
            out.append(ServerSentEvent(data="[DONE]"))
        return out
