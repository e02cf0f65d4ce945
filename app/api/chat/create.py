"""What a chat completion request does: the answers that continue a turn, or a new turn of the
conversation its history continues, of a new conversation, or of a copy of a history this server
cannot place (`history.py` says how a history is placed). Each is the Responses dialect's
response it stands for (`ResponseId`): the routes wait for it, or stream it, as that dialect."""

from __future__ import annotations

import uuid
from typing import Any

from app.api.auth import Caller
from app.api.chat.completion import reply_text
from app.api.chat.history import ChatHistory
from app.api.chat.messages import ChatMessage
from app.api.chat.requests import ChatRequest
from app.api.responses.create import mcp_names
from app.api.responses.errors import Unsupported
from app.api.responses.ids import ResponseId, call_items
from app.api.responses.objects import response_count, tools_of
from app.api.responses.translate import segments
from app.api.state import ApiState
from app.client import TurnRecord
from app.errors import TurnNotFound
from app.models import CANCELLED, COMPLETED, MESSAGE_COMMITTED, REQUIRES_ACTION

#: The namespace of a chat conversation's id: the owner and the digest of the history through
#: the user message of its first turn here.
CHAT_CONVERSATIONS = uuid.UUID("0b7e6f52-3c1d-4e8a-9a2b-6d4c8e1f3a57")
KEY = "chat:"  # a chat turn's idempotency key: the digest of its history


def start(api: ApiState, caller: Caller, request: ChatRequest) -> ResponseId:
    history = request.history
    if history.answered is not None:
        return _answer(api, caller, history)
    setup = request.setup()
    found = _continued(api, caller, request, setup)
    if found is not None:
        conversation_id, after = found
    else:
        conversation_id, after = _new(api, caller, request, setup), None
    return _submit(api, caller, request, conversation_id, digest=history.digest(setup), after=after)


def conversation_id_of(owner: str | None, digest: str) -> uuid.UUID:
    return uuid.uuid5(CHAT_CONVERSATIONS, f"{owner or ''}\x00{digest}")


def _answer(api: ApiState, caller: Caller, history: ChatHistory) -> ResponseId:
    """The tool messages answer the calls of the response that made them; sent again (a
    retry), they are the response that followed."""
    asked = history.answered
    assert asked is not None
    try:
        turn_id = api.client.turn_of_call(asked.calls[0].id, owner=caller.owner)
        record = api.client.turn_record(turn_id, owner=caller.owner)
    except TurnNotFound:
        raise Unsupported(
            f"{asked.where}: call {asked.calls[0].id!r} is not one this server made for you: "
            "the tool messages continue the completion that asked for them",
            param="messages",
        ) from None
    ids = {item for call in asked.call_ids for item in call_items(call)}
    found = segments(record.turn, record.events, tools_of(record, {}))
    holding = [s.id for s in found if any(item.get("id") in ids for item in s.output)]
    if not holding:
        raise Unsupported(f"{asked.where}: its calls are not of one response", param="messages")
    response = holding[-1]
    following = ResponseId(turn_id, response.segment + 1)
    if following.segment < response_count(record):
        return following  # (answered before: a retry of this request)
    if record.turn.status != REQUIRES_ACTION:
        raise Unsupported(
            f"{asked.where}: its turn waits for no answer (it ended)", param="messages"
        )
    api.client.answer_actions(turn_id, history.outputs, owner=caller.owner)
    return following


def _continued(
    api: ApiState, caller: Caller, request: ChatRequest, setup: dict[str, Any]
) -> tuple[uuid.UUID, int] | None:
    """The conversation and message the history continues: the turn its last reply answered,
    found by digest, if it ended (completed, or stopped) with that reply, word for word (else
    None: a copy is made, holding the reply as the client has it)."""
    history = request.history
    upto = history.previous
    if upto is None:
        return None
    candidates = [
        conversation_id_of(caller.owner, history.digest(setup, boundary))
        for boundary in history.boundaries
    ]
    turn_id = api.client.turn_keyed(
        candidates, KEY + history.digest(setup, upto), owner=caller.owner
    )
    if turn_id is None:
        return None
    record = api.client.turn_record(turn_id, owner=caller.owner)
    if record.turn.status not in (COMPLETED, CANCELLED) or not _replied(record, history):
        return None
    committed = [e.message_seq for e in record.events if e.type == MESSAGE_COMMITTED]
    return record.conversation.id, max(seq for seq in committed if seq is not None)


def _replied(record: TurnRecord, history: ChatHistory) -> bool:
    """The history's last reply is the content the turn's last completion gave (its replies
    joined, as `completion.reply_text` writes them): the client kept it as it was."""
    given = history.last_reply
    found = segments(record.turn, record.events, tools_of(record, {}))
    return given is not None and bool(found) and reply_text(found[-1].output) == given.text


def _new(api: ApiState, caller: Caller, request: ChatRequest, setup: dict[str, Any]) -> uuid.UUID:
    """A new conversation for the history (its id made from it, so a retry finds it), holding
    a copy of the history before the new message when there is one."""
    history = request.history
    if request.history.files:
        api.client.check_files(list(history.files), request.model)
    tools, approval = mcp_names(api, request.mcp)
    conversation_id = conversation_id_of(caller.owner, history.digest(setup))
    api.client.create_or_get(
        conversation_id=conversation_id,
        model=request.model,
        instructions=history.instructions,
        tools=tools,
        tool_choice=request.tool_choice,
        owner=caller.owner,
        client_tools=list(request.client_tools) or None,
        approval_tools=approval or None,
    )
    if history.earlier:
        api.client.import_history(
            conversation_id, [_imported(m) for m in history.earlier], owner=caller.owner
        )
    return conversation_id


def _imported(message: ChatMessage) -> dict[str, Any]:
    if message.files:
        raise Unsupported(
            f"{message.where}: files in a history this server did not answer are not taken "
            "(send them with the new message)",
            param="messages",
        )
    return {
        "role": message.role,
        "content": message.text,
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.calls
        ]
        or None,
        "tool_call_id": message.call_id,
    }


def _submit(
    api: ApiState,
    caller: Caller,
    request: ChatRequest,
    conversation_id: uuid.UUID,
    *,
    digest: str,
    after: int | None,
) -> ResponseId:
    history = request.history
    submitted = api.client.submit_message(
        conversation_id,
        history.text or "",
        idempotency_key=KEY + digest,
        owner=caller.owner,
        metadata=request.metadata,
        after_seq=after,
        output_schema=request.output_schema,
        files=list(history.files) or None,
    )
    assert submitted.turn_id is not None
    return ResponseId(submitted.turn_id, 0)
