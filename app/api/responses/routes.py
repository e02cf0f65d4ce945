"""`/v1/responses`: OpenAI's Responses API over our turns (`ids.py` has the mapping), for the
official `openai` SDKs: create (waiting for the response, or `background`), retrieve, cancel,
delete, and the input items. Errors are OpenAI's shape (`errors.py`)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query
from fastapi.concurrency import run_in_threadpool
from sse_starlette import ServerSentEvent

from app.api.auth import Authenticated, Caller
from app.api.event_stream import EventStream
from app.api.gate import TAKES_FILES, GuardedRoute
from app.api.problems import documented, speaks
from app.api.responses.errors import (
    PREFIX,
    REFUSALS,
    ResponseNotFound,
    Unsupported,
    openai_error,
)
from app.api.responses.ids import ResponseId
from app.api.responses.objects import (
    initial_object,
    input_items,
    response_count,
    response_object,
    tools_of,
)
from app.api.responses.requests import CreateResponse, McpTool, parse_create
from app.api.responses.stream import ResponseEvents
from app.api.state import Api, ApiState
from app.api.stream_loop import Renderer, follow_turn, turn_stream
from app.client import (
    ConversationView,
    Cursor,
    Delta,
    Discarded,
    EventView,
    Following,
    TurnRecord,
)
from app.errors import TurnNotFound
from app.models import MESSAGE_COMMITTED, REQUIRES_ACTION

log = logging.getLogger(__name__)
router = APIRouter(prefix="/responses", tags=["responses (OpenAI)"], route_class=GuardedRoute)
speaks(PREFIX, openai_error, REFUSALS)  # (errors in OpenAI's shape on the dialect's paths)

#: The namespace of the conversation ids chosen from an `Idempotency-Key` (a retried create
#: finds the conversation its first attempt made).
KEYED_CONVERSATIONS = uuid.UUID("5f1c2a0e-8d3b-4f6a-9c7e-2b4d6e8f0a13")

#: A wait for a response re-reads its turn at least this often.
WAIT_ROUND_SECONDS = 2.0

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]


@router.post(
    "", responses=documented(400, 401, 404, 409, 413, 422, 429, 503), openapi_extra=TAKES_FILES
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
    response = await run_in_threadpool(lambda: _create(api, caller, request, idempotency_key))

    if request.stream:
        return await _stream(api, caller, response, None)
    if not request.background:
        record = await api.held(caller.owner, lambda: _wait(api, caller, response))
    else:
        record = await run_in_threadpool(
            lambda: api.client.turn_record(response.turn_id, owner=caller.owner)
        )
    servers = await run_in_threadpool(lambda: _servers(api))
    return response_object(record, response, servers, background=request.background)


@router.get("/{response_id}", responses=documented(401, 404, 422, 429, 503))
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
    response = _parse(response_id)
    if stream:
        return await _stream(api, caller, response, starting_after)
    record = await run_in_threadpool(lambda: _record(api, caller, response))
    servers = await run_in_threadpool(lambda: _servers(api))
    return response_object(record, response, servers)


@router.post("/{response_id}/cancel", responses=documented(401, 404, 422, 429, 503))
def cancel_response(response_id: str, caller: Authenticated, api: Api) -> dict[str, Any]:
    """Stop the response's turn: the model call or the tool it runs is cancelled, open calls
    are answered "cancelled". Idempotent; a finished response comes back as it is."""
    response = _parse(response_id)
    record = _record(api, caller, response)
    if not record.turn.is_finished and _is_last(record, response):
        api.client.cancel_turn(response.turn_id, owner=caller.owner)
        # The worker holding it ends it in moments (its model or tool call is cancelled).
        api.open_stream(caller.owner)  # a wait: counted as a long poll
        try:
            record = _wait(api, caller, response)
        finally:
            api.close_stream(caller.owner)
    return response_object(record, response, _servers(api))


@router.delete("/{response_id}", responses=documented(401, 404, 409, 422, 503))
def delete_response(response_id: str, caller: Authenticated, api: Api) -> dict[str, Any]:
    """Delete the response's whole conversation (its turns, messages and events): a response
    is part of a conversation's transcript and cannot be cut out of it alone. 409 while a turn
    runs."""
    response = _parse(response_id)
    record = _record(api, caller, response)
    api.client.delete_conversation(record.conversation.id, owner=caller.owner)
    return {"id": str(response), "object": "response.deleted", "deleted": True}


@router.get("/{response_id}/input_items", responses=documented(401, 404, 422, 503))
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
    response = _parse(response_id)
    record = _record(api, caller, response)
    items = input_items(record, response, _servers(api))
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


# --- the stream ---------------------------------------------------------------------------------


async def _stream(
    api: ApiState, caller: Caller, response: ResponseId, starting_after: int | None
) -> EventStream:
    """The response's events as server-sent events: a follower of its conversation from just
    before its turn's first event, rendered by `stream.ResponseEvents`, those after
    `starting_after` written."""
    after = -1 if starting_after is None else starting_after
    return await turn_stream(api, caller.owner, lambda: _open(api, caller, response, after))


def _open(
    api: ApiState, caller: Caller, response: ResponseId, after: int
) -> tuple[Following, Renderer, list[ServerSentEvent]]:
    """The response's renderer, a follower of its conversation, and its first events."""
    record = _record(api, caller, response)
    servers = _servers(api)
    events = ResponseEvents(response, initial_object(record, response, servers))
    first = events.begin(record.turn, tools_of(record, servers))

    def final() -> dict[str, Any]:
        """The response as it ended: at the turn's end, from its terminal event (no read); at
        a pause, read."""
        if events.final_turn is None:
            ended = _record(api, caller, response)
        else:
            ended = TurnRecord(events.final_turn, record.conversation, events.events)
        return response_object(ended, response, servers)

    written = _Written(api, events, after, final)
    return follow_turn(api, record, caller.owner), written, written.written(first)


class _Written:
    """`ResponseEvents` as the stream's renderer: its events after `after`, each as an SSE
    event of its type; at the end, the response as it ended (`final`, read in the readers'
    pool)."""

    def __init__(
        self,
        api: ApiState,
        events: ResponseEvents,
        after: int,
        final: Callable[[], dict[str, Any]],
    ) -> None:
        self.api, self.events, self.after, self.final = api, events, after, final

    @property
    def ended(self) -> bool:
        return self.events.ended

    def feed(self, item: EventView | Delta | Discarded, cursor: Cursor) -> list[ServerSentEvent]:
        return self.written(self.events.feed(item))

    async def finish(self, following: Following) -> list[ServerSentEvent]:
        if not self.events.ended:
            return []  # (the follower was closed)
        final = await self.api.read_step(self.final)
        return self.written(self.events.finish(final))

    def written(self, events: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return [
            ServerSentEvent(data=json.dumps(event), event=event["type"])
            for event in events
            if event["sequence_number"] > self.after
        ]


# --- the steps ----------------------------------------------------------------------------------


def _parse(response_id: str) -> ResponseId:
    try:
        return ResponseId.parse(response_id)
    except Unsupported:
        raise ResponseNotFound(f"no response {response_id!r}") from None


def _record(api: ApiState, caller: Caller, response: ResponseId) -> TurnRecord:
    try:
        record = api.client.turn_record(response.turn_id, owner=caller.owner)
    except TurnNotFound:
        raise ResponseNotFound(f"no response {response}") from None
    if response.segment >= response_count(record):
        raise ResponseNotFound(f"no response {response}")
    return record


def _is_last(record: TurnRecord, response: ResponseId) -> bool:
    return response.segment == response_count(record) - 1


def _servers(api: ApiState) -> dict[str, str]:
    """Each tool's MCP server, from the catalogue the workers publish."""
    return {tool.name: tool.server for tool in api.client.admin.list_tools()}


def _wait(api: ApiState, caller: Caller, response: ResponseId) -> TurnRecord:
    """The response's turn once it rests (ends, or pauses), at most the server's wait: each
    round a long poll on the log after the turn's last event (an earlier pause of the same
    turn is behind it), then the turn read again."""
    deadline = time.monotonic() + api.settings.api_max_wait_seconds
    while True:
        record = api.client.turn_record(response.turn_id, owner=caller.owner)
        remaining = deadline - time.monotonic()
        if _rests(record) or remaining <= 0:
            return record
        api.client.wait_for_events(
            record.conversation.id,
            record.events[-1].seq if record.events else 0,
            limit=1,
            wait=min(remaining, WAIT_ROUND_SECONDS),
            log_interval=max(WAIT_ROUND_SECONDS, api.settings.api_log_poll_seconds),
            owner=caller.owner,
        )


def _rests(record: TurnRecord) -> bool:
    """Ended, or waiting for the user (a wait that was answered turns it back to running)."""
    return record.turn.is_finished or record.turn.status == REQUIRES_ACTION


def _create(api: ApiState, caller: Caller, request: CreateResponse, key: str | None) -> ResponseId:
    client = api.client
    if request.previous is not None:
        return _continue(api, caller, request, key)
    if request.conversation is not None:
        conversation = client.get_conversation(  # (its setup only)
            request.conversation, messages=False, owner=caller.owner
        )
        _check_setup(api, request, conversation)
        return _submit(api, caller, request.conversation, request, key)
    if request.text is None:
        raise Unsupported("input needs a user message to start a response", param="input")
    if request.files:  # (checked before the conversation is created)
        api.client.check_files(list(request.files), request.model)
    tools, approval = _mcp_names(api, request.mcp)
    chosen = None
    if key is not None:
        chosen = uuid.uuid5(KEYED_CONVERSATIONS, f"{caller.owner}\x00{key}")
    view, _ = client.create_or_get(
        conversation_id=chosen,
        model=request.model,
        instructions=request.instructions,
        tools=tools,
        tool_choice=request.tool_choice,
        owner=caller.owner,
        client_tools=list(request.client_tools) or None,
        approval_tools=approval or None,
    )
    return _submit(api, caller, view.id, request, key)


def _submit(
    api: ApiState,
    caller: Caller,
    conversation_id: uuid.UUID,
    request: CreateResponse,
    key: str | None,
    *,
    after: int | None = None,
) -> ResponseId:
    assert request.text is not None
    submitted = api.client.submit_message(
        conversation_id,
        request.text,
        idempotency_key=key,
        owner=caller.owner,
        metadata=request.metadata,
        after_seq=after,
        output_schema=request.output_schema,
        files=list(request.files) or None,
    )
    assert submitted.turn_id is not None
    record = api.client.turn_record(submitted.turn_id, owner=caller.owner)
    # A message that answered the turn's question continues that turn: its next response.
    return ResponseId(submitted.turn_id, response_count(record) - 1)


def _continue(
    api: ApiState, caller: Caller, request: CreateResponse, key: str | None
) -> ResponseId:
    previous = request.previous
    assert previous is not None
    try:
        record = api.client.turn_record(previous.turn_id, owner=caller.owner)
    except TurnNotFound:
        raise ResponseNotFound(f"previous_response_id: no response {previous}") from None
    conversation = record.conversation
    _check_setup(api, request, conversation)
    count = response_count(record)
    if previous.segment >= count:
        raise ResponseNotFound(f"previous_response_id: no response {previous}")
    latest = previous.segment == count - 1
    if request.answers:
        if not (latest and record.turn.status == REQUIRES_ACTION):
            raise Unsupported(
                f"response {previous} waits for no answer (it is not the latest response of "
                "its turn, or its turn does not wait)",
                param="previous_response_id",
            )
        api.client.answer_actions(
            previous.turn_id, request.outputs, approvals=request.approvals, owner=caller.owner
        )
        return ResponseId(previous.turn_id, previous.segment + 1)
    current = api.client.current_turn(conversation.id, owner=caller.owner)
    if current is not None and current.id == previous.turn_id and latest:
        return _submit(api, caller, conversation.id, request, key)
    # An earlier response: the conversation goes on from it, on a new branch.
    if not (latest and record.turn.is_finished):
        raise Unsupported(
            f"previous_response_id {previous} waits for answers, or its turn has not ended: "
            "continue from the response that followed them",
            param="previous_response_id",
        )
    committed = [
        e.message_seq
        for e in record.events
        if e.type == MESSAGE_COMMITTED and e.message_seq is not None
    ]
    return _submit(api, caller, conversation.id, request, key, after=max(committed, default=None))


def _check_setup(api: ApiState, request: CreateResponse, setup: ConversationView) -> None:
    """A conversation's setup is fixed at its first response: a later request may repeat it,
    not change it (yet)."""
    model, instructions = setup.model, setup.instructions
    tools, client_tools = setup.tools, setup.client_tools
    if request.model != model:
        raise Unsupported(
            f"model {request.model!r}: this conversation runs {model!r} (a model per response is "
            "not supported yet)",
            param="model",
        )
    if request.instructions is not None and request.instructions != instructions:
        raise Unsupported(
            "instructions differ from the conversation's (they are set by its first response)",
            param="instructions",
        )
    if request.tools_given:
        names, approval = _mcp_names(api, request.mcp)
        functions = sorted(str(tool["name"]) for tool in request.client_tools)
        if (
            sorted(names) != sorted(tools)
            or functions != sorted(str(t["name"]) for t in client_tools)
            or sorted(approval) != sorted(setup.approval_tools)
        ):
            raise Unsupported(
                "tools differ from the conversation's (they are set by its first response)",
                param="tools",
            )


def _mcp_names(api: ApiState, servers: tuple[McpTool, ...]) -> tuple[list[str], list[str]]:
    """The catalogue's tools of each named server (those allowed), and those of them whose
    every call asks for approval (`require_approval`)."""
    if not servers:
        return [], []
    catalogue = api.client.admin.list_tools()
    names: list[str] = []
    approval: list[str] = []
    for server in servers:
        offered = {tool.name for tool in catalogue if tool.server == server.server_label}
        if not offered:
            known = sorted({tool.server for tool in catalogue})
            raise Unsupported(
                f"no MCP server {server.server_label!r} (the workers offer: "
                f"{', '.join(known) or 'none'})",
                param="tools",
            )
        wanted = offered if server.allowed_tools is None else set(server.allowed_tools)
        unknown = sorted((wanted | set(server.approve)) - offered)
        if unknown:
            raise Unsupported(
                f"server {server.server_label!r} has no tool {unknown[0]!r}", param="tools"
            )
        asked = sorted(wanted) if server.approve_all else sorted(set(server.approve) & wanted)
        names.extend(sorted(wanted))
        approval.extend(asked)
    return names, approval
