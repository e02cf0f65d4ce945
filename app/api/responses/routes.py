"""`/v1/responses`: OpenAI's Responses API over our turns (`ids.py` has the mapping), for the
official `openai` SDKs: create (waiting for the response, or `background`), retrieve, cancel,
delete, and the input items. What a create does is `create.py`, a response's stream `sse.py`,
finding one and waiting for it `lookup.py`. Errors are OpenAI's shape (`errors.py`, declared
here to `problems.speaks`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query
from fastapi.concurrency import run_in_threadpool

from app.api.auth import Authenticated
from app.api.gate import TAKES_FILES, GuardedRoute
from app.api.problems import speaks
from app.api.responses import create, lookup, sse
from app.api.responses.errors import (
    PREFIX,
    REFUSALS,
    Unsupported,
    documented_openai,
    openai_error,
)
from app.api.responses.objects import input_items, response_object
from app.api.responses.requests import parse_create
from app.api.state import Api

router = APIRouter(prefix="/responses", tags=["responses (OpenAI)"], route_class=GuardedRoute)
speaks(PREFIX, openai_error, REFUSALS)  # (errors in OpenAI's shape on the dialect's paths)

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]


@router.post(
    "",
    responses=documented_openai(400, 401, 404, 408, 409, 413, 415, 422, 429, 503),
    openapi_extra=TAKES_FILES,
)
async def create_response(
    caller: Authenticated,
    api: Api,
    body: Annotated[dict[str, Any], Body()],
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """A response: a new turn (or the answers that continue a paused one); waits for it to end
    or pause (at most the server's wait) unless `background`."""
    request = parse_create(body)
    response = await run_in_threadpool(lambda: create.start(api, caller, request, idempotency_key))

    if request.stream:
        return await sse.stream(api, caller, response, None)
    if not request.background:
        record = await api.held(caller.owner, lambda: lookup.wait(api, caller, response))
    else:
        record = await run_in_threadpool(
            lambda: api.client.turn_record(response.turn_id, owner=caller.owner)
        )
    servers = await run_in_threadpool(lambda: lookup.servers_of(api))
    return response_object(record, response, servers, background=request.background)


@router.get("/{response_id}", responses=documented_openai(400, 401, 404, 422, 429, 503))
async def retrieve_response(
    response_id: str,
    *,
    caller: Authenticated,
    api: Api,
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Any:
    """The response as it is now (poll it until its status is no longer queued or
    in_progress); with `stream=true`, its events from the first (or after `starting_after`),
    then live until it ends: the same events with the same numbers on every replay."""
    response = lookup.parse(response_id)
    if stream:
        return await sse.stream(api, caller, response, starting_after)
    record = await run_in_threadpool(lambda: lookup.record_of(api, caller, response))
    servers = await run_in_threadpool(lambda: lookup.servers_of(api))
    return response_object(record, response, servers)


@router.post("/{response_id}/cancel", responses=documented_openai(401, 404, 422, 429, 503))
def cancel_response(response_id: str, caller: Authenticated, api: Api) -> dict[str, Any]:
    """Stop the response's turn: the model call or the tool it runs is cancelled, open calls
    are answered "cancelled". Idempotent; a finished response comes back as it is."""
    response = lookup.parse(response_id)
    record = lookup.record_of(api, caller, response)
    if not record.turn.is_finished and lookup.is_last(record, response):
        api.client.cancel_turn(response.turn_id, owner=caller.owner)
        # The worker holding it ends it in moments (its model or tool call is cancelled).
        api.open_stream(caller.owner)  # a wait: counted as a long poll
        try:
            record = lookup.wait(api, caller, response)
        finally:
            api.close_stream(caller.owner)
    return response_object(record, response, lookup.servers_of(api))


@router.delete("/{response_id}", responses=documented_openai(401, 404, 409, 422, 503))
def delete_response(response_id: str, caller: Authenticated, api: Api) -> dict[str, Any]:
    """Delete the response's whole conversation (its turns, messages and events): a response
    is part of a conversation's transcript and cannot be cut out of it alone. 409 while a turn
    runs."""
    response = lookup.parse(response_id)
    record = lookup.record_of(api, caller, response)
    api.client.delete_conversation(record.conversation.id, owner=caller.owner)
    return {"id": str(response), "object": "response.deleted", "deleted": True}


@router.get("/{response_id}/input_items", responses=documented_openai(400, 401, 404, 422, 503))
def list_input_items(
    response_id: str,
    *,
    caller: Authenticated,
    api: Api,
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: str | None = None,
) -> dict[str, Any]:
    """What the response was given: the user's message, or the answers that continued it."""
    response = lookup.parse(response_id)
    record = lookup.record_of(api, caller, response)
    items = input_items(record, response, lookup.servers_of(api))
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise Unsupported(f"after {after!r} is not an item of this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
