"""`/v1/ai-sdk/chat`: the AI SDK's chat transport over our turns, for `useChat` (React, Vue,
Svelte) with its `DefaultChatTransport`: send a message or the answers to a pause and read the
turn as a UI message stream (`chunks.py`), resume it (`resume: true`), stop it (a real cancel).

    POST /v1/ai-sdk/chat                useChat's body (`requests.py`): the stream of the turn
                                        started (or continued) by its last message
    GET  /v1/ai-sdk/chat/{id}/stream    204 when the chat has no turn going; else its turn's
                                        stream replayed from `start`, then live
    POST /v1/ai-sdk/chat/{id}/stop      cancel the chat's turn (the model call or the tool it
                                        runs is cancelled): {"stopped": true|false}

Errors are our own problem documents: `useChat`'s transport throws an `Error` whose message is
the body."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Response
from fastapi.concurrency import run_in_threadpool
from sse_starlette import ServerSentEvent

from app.api.aisdk.chunks import UiMessageChunks
from app.api.aisdk.requests import (
    ChatRequest,
    answers,
    check_chat_id,
    conversation_of,
    parse_chat,
)
from app.api.auth import Authenticated, Caller
from app.api.event_stream import EventStream
from app.api.gate import TAKES_FILES, GuardedRoute
from app.api.problems import documented
from app.api.state import Api, ApiState
from app.api.stream_loop import Renderer, follow_turn, turn_stream
from app.client import (
    Cursor,
    Delta,
    Discarded,
    EventView,
    Following,
    TurnRecord,
    TurnView,
)
from app.client.schemas import check_output_schema
from app.errors import ConversationNotFound, InvalidRequest, TurnNotFound
from app.models import ACTION_REQUIRED, REQUIRES_ACTION

router = APIRouter(prefix="/ai-sdk/chat", tags=["chat (AI SDK)"], route_class=GuardedRoute)

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
#: An idempotency key per useChat message: a retried POST finds the turn its message started.
MESSAGE_KEY = "ai-sdk:"


@router.post(
    "", responses=documented(400, 401, 404, 409, 413, 422, 429, 503), openapi_extra=TAKES_FILES
)
async def send_messages(
    caller: Authenticated, api: Api, body: Annotated[Any, Body()]
) -> EventStream:
    """The turn the chat's last message starts (a user's message) or continues (the answers
    to its pause), as a UI message stream."""
    request = parse_chat(body)
    turn_id, continues_after = await run_in_threadpool(lambda: _send(api, caller, request))
    return await _stream(api, caller, turn_id, continues_after)


@router.get("/{chat_id}/stream", responses=documented(400, 401, 422, 429, 503, also={204: {}}))
async def resume_stream(chat_id: str, caller: Authenticated, api: Api) -> Any:
    """The chat's turn going on (or waiting for the client), replayed from its `start` and
    followed live; 204 when there is none (a chat never used included)."""
    turn_id = await run_in_threadpool(lambda: _going(api, caller, chat_id))
    if turn_id is None:
        return Response(status_code=204)
    return await _stream(api, caller, turn_id, 0)


@router.post("/{chat_id}/stop", responses=documented(400, 401, 422, 503))
def stop(chat_id: str, caller: Authenticated, api: Api) -> dict[str, Any]:
    """Cancel the chat's turn: its model call or tool is cancelled, its open calls are
    answered "cancelled". Idempotent: `stopped` is false when no turn was going."""
    turn = _current(api, caller, chat_id)
    if turn is None or turn.is_finished:
        return {"stopped": False, "turn": None if turn is None else str(turn.id)}
    api.client.cancel_turn(turn.id, owner=caller.owner)
    return {"stopped": True, "turn": str(turn.id)}


# --- the stream ---------------------------------------------------------------------------------


async def _stream(
    api: ApiState, caller: Caller, turn_id: uuid.UUID, continues_after: int
) -> EventStream:
    return await turn_stream(
        api, caller.owner, lambda: _open(api, caller, turn_id, continues_after), dict(HEADERS)
    )


def _open(
    api: ApiState, caller: Caller, turn_id: uuid.UUID, continues_after: int
) -> tuple[Following, Renderer, list[ServerSentEvent]]:
    record = api.client.turn_record(turn_id, owner=caller.owner)
    pauses = [event.seq for event in record.events if event.type == ACTION_REQUIRED]
    if record.turn.status == REQUIRES_ACTION:
        pauses.pop()  # the pause it waits in ends the stream
    chunks = UiMessageChunks(
        record.turn,
        record.conversation.client_answered,
        continues_after=continues_after,
        answered_through=max(pauses, default=0),
    )
    return follow_turn(api, record, caller.owner), _Written(chunks), _written(chunks.begin())


class _Written:
    """`UiMessageChunks` as the stream's renderer: each chunk as `data: {json}`, then
    `data: [DONE]`."""

    def __init__(self, chunks: UiMessageChunks) -> None:
        self.chunks = chunks

    @property
    def ended(self) -> bool:
        return self.chunks.ended

    def feed(self, item: EventView | Delta | Discarded, cursor: Cursor) -> list[ServerSentEvent]:
        return _written(self.chunks.feed(item))

    async def finish(self, following: Following) -> list[ServerSentEvent]:
        return [ServerSentEvent(data="[DONE]")]


def _written(chunks: list[dict[str, Any]]) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(chunk)) for chunk in chunks]


# --- the steps ----------------------------------------------------------------------------------


def _send(api: ApiState, caller: Caller, request: ChatRequest) -> tuple[uuid.UUID, int]:
    """The turn to stream, and the event after which the client already holds it."""
    conversation_id = conversation_of(caller.owner, request.chat_id)
    if request.files:  # (checked before the chat's conversation may be created)
        api.client.check_files(list(request.files), request.setup.get("model"))
    _chat(api, caller, conversation_id, request)
    if request.branch is not None:
        return _branch(api, caller, conversation_id, request), 0
    if request.text is not None:
        submitted = api.client.submit_message(
            conversation_id,
            request.text,
            idempotency_key=f"{MESSAGE_KEY}{request.message_id}"[:200],
            owner=caller.owner,
            files=list(request.files) or None,
        )
        assert submitted.turn_id is not None
        return submitted.turn_id, 0
    record = _answered_turn(api, caller, conversation_id, request.message_id)
    waiting = [
        action for action in record.turn.actions if not action.answered and action.decision is None
    ]
    outputs, approvals = answers(request.parts, waiting)
    api.client.answer_actions(record.turn.id, outputs, approvals=approvals, owner=caller.owner)
    pauses = [event.seq for event in record.events if event.type == ACTION_REQUIRED]
    return record.turn.id, pauses[-1]


def _branch(
    api: ApiState, caller: Caller, conversation_id: uuid.UUID, request: ChatRequest
) -> uuid.UUID:
    """An edit of, or a new answer to, the chat's k-th user message (of the active path, which
    the client's list shows): a turn on a new branch."""
    path = api.client.get_conversation(conversation_id, owner=caller.owner).messages
    asked = [message.seq for message in path if message.role == "user"]
    if not 1 <= request.user_index <= len(asked):
        raise InvalidRequest(
            f"the chat's user message {request.user_index} is not in its transcript (it holds "
            f"{len(asked)})"
        )
    seq = asked[request.user_index - 1]
    key = f"{MESSAGE_KEY}{request.branch}:{request.message_id}:{seq}"[:200]
    if request.branch == "edit":
        assert request.text is not None
        submitted = api.client.edit_message(
            conversation_id, seq, request.text, idempotency_key=key, owner=caller.owner
        )
    else:
        submitted = api.client.regenerate(
            conversation_id, seq, idempotency_key=key, owner=caller.owner
        )
    assert submitted.turn_id is not None
    return submitted.turn_id


def _answered_turn(
    api: ApiState, caller: Caller, conversation_id: uuid.UUID, message_id: str
) -> TurnRecord:
    """The turn an assistant message is (its id is the turn's), waiting for the client."""
    try:
        record = api.client.turn_record(uuid.UUID(message_id), owner=caller.owner)
    except (ValueError, TurnNotFound):
        raise InvalidRequest(
            f"the assistant message {message_id!r} is not a turn of this chat"
        ) from None
    if record.conversation.id != conversation_id:
        raise InvalidRequest(f"the assistant message {message_id!r} is not a turn of this chat")
    if record.turn.status != REQUIRES_ACTION:
        raise InvalidRequest(
            f"the turn of message {message_id!r} waits for nothing (it is {record.turn.status})"
        )
    return record


def _chat(api: ApiState, caller: Caller, conversation_id: uuid.UUID, request: ChatRequest) -> None:
    """The chat's conversation, created at its first message with the setup given; later the
    setup given must be the conversation's."""
    setup = request.setup
    try:
        existing = api.client.get_conversation(conversation_id, messages=False, owner=caller.owner)
    except ConversationNotFound:
        existing = None
    if existing is None:
        if request.text is None:
            raise ConversationNotFound(f"no chat {request.chat_id!r}")
        api.client.create_or_get(
            conversation_id=conversation_id,
            model=setup.get("model"),
            instructions=setup.get("instructions"),
            tools=setup.get("tools") or (),
            owner=caller.owner,
            client_tools=setup.get("clientTools"),
            clarify=setup.get("clarify", True),
            approval_tools=setup.get("approvalTools"),
            output_schema=setup.get("outputSchema"),
            fallback_models=setup.get("fallbackModels"),
        )
        return
    given = {
        "model": existing.model,
        "instructions": existing.instructions,
        "tools": list(existing.tools),
        "clientTools": list(existing.client_tools),
        "approvalTools": list(existing.approval_tools),
        "clarify": existing.clarify,
        "outputSchema": existing.output_schema,
        "fallbackModels": list(existing.fallback_models),
    }
    for name, given_value in setup.items():
        # (a schema as it was kept: its defaults filled in)
        value = check_output_schema(given_value) if name == "outputSchema" else given_value
        if value != given[name] and not (value in ([], None) and not given[name]):
            raise InvalidRequest(
                f"{name} differs from the chat's (its setup is fixed by its first message)"
            )


def _going(api: ApiState, caller: Caller, chat_id: str) -> uuid.UUID | None:
    turn = _current(api, caller, chat_id)
    return None if turn is None or turn.is_finished else turn.id


def _current(api: ApiState, caller: Caller, chat_id: str) -> TurnView | None:
    """The chat's current (or last) turn; None for a chat never used (or another owner's)."""
    conversation_id = conversation_of(caller.owner, check_chat_id(chat_id))
    try:
        return api.client.current_turn(conversation_id, owner=caller.owner)
    except ConversationNotFound:
        return None
