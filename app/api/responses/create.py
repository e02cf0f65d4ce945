"""What a create request does: a new conversation and its first turn, a message to a given
conversation, or, after `previous_response_id`, the answers that continue its turn, the next turn,
or a turn on a new branch from an earlier response. The setup a conversation was given first is
checked against each later request. A new turn keeps what its response shows back of the request
(`echo`: `store`, and the `previous_response_id` named, or the one a stateless history's anchor
stands for), so a create, a retrieve and every replay of its stream show the same."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import replace

from app.api.auth import Caller
from app.api.responses.errors import ResponseNotFound, Unsupported
from app.api.responses.history import Anchor, imported
from app.api.responses.ids import ResponseId, call_items, message_item
from app.api.responses.objects import response_count, tools_of
from app.api.responses.requests import CreateResponse
from app.api.responses.tools_given import McpTool
from app.api.responses.translate import segments
from app.api.state import ApiState
from app.client import ConversationView
from app.client.tool_choice import read_tool_choice
from app.errors import TurnNotFound
from app.models import MESSAGE_COMMITTED, REQUIRES_ACTION

#: The namespace of the conversation ids chosen from an `Idempotency-Key` (a retried create
#: finds the conversation its first attempt made).
KEYED_CONVERSATIONS = uuid.UUID("5f1c2a0e-8d3b-4f6a-9c7e-2b4d6e8f0a13")
#: The namespace of the conversations a history written elsewhere is copied into (by its digest).
COPIED_CONVERSATIONS = uuid.UUID("9d2e4c61-7a35-4b0f-8e19-3c5a7d9b1f24")


def start(api: ApiState, caller: Caller, request: CreateResponse, key: str | None) -> ResponseId:
    client = api.client
    if request.anchor is not None:  # a stateless input: the chained request it stands for
        request = replace(request, previous=_response_holding(api, caller, request.anchor))
    if request.previous is not None:
        return _continue(api, caller, request, key)
    if request.earlier:
        return _copied(api, caller, request, key)
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
    tools, approval = mcp_names(api, request.mcp)
    chosen = None
    if key is not None:
        chosen = uuid.uuid5(KEYED_CONVERSATIONS, f"{caller.owner}\x00{key}")
    view, _ = client.create_or_get(
        conversation_id=chosen,
        model=request.model,
        instructions=request.instructions,
        tools=tools,
        # (checked against the tools there)
        tool_choice="auto" if request.tool_choice is None else request.tool_choice,
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
    previous = None if request.previous is None else str(request.previous)
    submitted = api.client.submit_message(
        conversation_id,
        request.text,
        idempotency_key=key,
        owner=caller.owner,
        metadata=request.metadata,
        after_seq=after,
        output_schema=request.output_schema,
        files=list(request.files) or None,
        echo={"store": request.store, "previous_response_id": previous},
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


def _copied(api: ApiState, caller: Caller, request: CreateResponse, key: str | None) -> ResponseId:
    """A history written elsewhere (history.py) as a new conversation: its earlier items copied
    as its first messages, its last user message the first turn. The conversation's id and the
    turn's key are made from the request, so the same request sent again is the same turn."""
    rows = imported(request.earlier)
    setup = [request.model, request.instructions, list(request.client_tools), repr(request.mcp)]
    said = json.dumps([setup, rows, request.text], sort_keys=True, default=str)
    digest = hashlib.sha256(said.encode()).hexdigest()
    if request.files:
        api.client.check_files(list(request.files), request.model)
    tools, approval = mcp_names(api, request.mcp)
    view, _ = api.client.create_or_get(
        conversation_id=uuid.uuid5(COPIED_CONVERSATIONS, f"{caller.owner}\x00{digest}"),
        model=request.model,
        instructions=request.instructions,
        tools=tools,
        tool_choice="auto" if request.tool_choice is None else request.tool_choice,
        owner=caller.owner,
        client_tools=list(request.client_tools) or None,
        approval_tools=approval or None,
    )
    api.client.import_history(view.id, rows, owner=caller.owner)
    return _submit(api, caller, view.id, request, key or f"copy:{digest}")


def _response_holding(api: ApiState, caller: Caller, anchor: Anchor) -> ResponseId:
    """The caller's response whose output holds the anchor (history.py); a 400 naming the item
    when there is none."""
    try:
        if anchor.turn_id is not None and anchor.seq is not None:
            turn_id, ids = anchor.turn_id, {message_item(anchor.turn_id, anchor.seq)}
        else:
            assert anchor.call_id is not None
            turn_id = api.client.turn_of_call(anchor.call_id, owner=caller.owner)
            ids = call_items(anchor.call_id)
        record = api.client.turn_record(turn_id, owner=caller.owner)
    except TurnNotFound:
        record = None
    if record is not None:
        for segment in segments(record.turn, record.events, tools_of(record, {})):
            if any(item.get("id") in ids for item in segment.output):
                return segment.id
    raise Unsupported(f"{anchor.where} is not an item of any of your responses", param=anchor.where)


def _check_setup(api: ApiState, request: CreateResponse, setup: ConversationView) -> None:
    """A conversation's setup is fixed at its first response: a later request may repeat it,
    not change it (yet). Its `tool_choice` is checked against the conversation's tools, and the
    conversation's applies (frameworks send theirs on every request of a tool loop)."""
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
    if request.tool_choice is not None:
        read_tool_choice(request.tool_choice, [*tools, *(str(t["name"]) for t in client_tools)])
    if request.tools_given:
        names, approval = mcp_names(api, request.mcp)
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


def mcp_names(api: ApiState, servers: tuple[McpTool, ...]) -> tuple[list[str], list[str]]:
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
