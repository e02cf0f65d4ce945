"""Conversations and the messages submitted to them: thin routes over `AsyncChatClient`."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response

from app.api.auth import Authenticated
from app.api.bodies import MAX_SEQ, ConversationCreate, MessageCreate
from app.api.gate import TAKES_FILES, GuardedRoute
from app.api.problems import documented
from app.api.routes.turns import CANCEL_RESPONSES, as_cancelled
from app.api.schemas import Conversation, ConversationList, Submission, Turn, TurnResult
from app.api.state import Api
from app.models import REQUIRES_ACTION

router = APIRouter(prefix="/conversations", tags=["conversations"], route_class=GuardedRoute)


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="the same key and text again returns the first turn and runs nothing twice",
    ),
]


@router.post(
    "",
    status_code=201,
    response_model=Conversation,
    responses=documented(
        400,
        401,
        409,
        413,
        415,
        422,
        503,
        also={200: {"model": Conversation, "description": "it existed, same fields"}},
    ),
)
async def create_conversation(
    body: ConversationCreate, caller: Authenticated, api: Api, response: Response
) -> Conversation:
    """A new idle conversation (201); with a chosen `id` that exists with the same fields, that
    one (200); with other fields, 409 `conversation_conflict`."""
    # (the body's fields are the setup's keys, `app.client.setup.Setup`)
    setup = body.model_dump(exclude={"id"})
    view, created = await api.chat.create_or_get(
        conversation_id=body.id, owner=caller.owner, **setup
    )
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/conversations/{view.id}"
    return Conversation.summary(view)


@router.get("", response_model=ConversationList, responses=documented(400, 401, 422, 503))
async def list_conversations(
    caller: Authenticated,
    api: Api,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before: Annotated[
        uuid.UUID | None, Query(description="the previous page's next_before")
    ] = None,
) -> ConversationList:
    """The caller's conversations, newest first."""
    page = await api.chat.list_conversations(owner=caller.owner, limit=limit, before=before)
    return ConversationList(
        data=[Conversation.summary(view) for view in page.conversations],
        next_before=page.next_before,
    )


@router.get(
    "/{conversation_id}", response_model=Conversation, responses=documented(401, 404, 422, 503)
)
async def get_conversation(
    conversation_id: uuid.UUID,
    caller: Authenticated,
    api: Api,
    after_seq: Annotated[
        int | None, Query(ge=0, le=MAX_SEQ, description="only the messages after this seq")
    ] = None,
    versions: Annotated[
        Literal["path", "all"],
        Query(description="the active path's messages, or every version's (`active` says)"),
    ] = "path",
) -> Conversation:
    """Its status, setup, usage and transcript: the active path, each message with its
    versions (`siblings`)."""
    view = await api.chat.get_conversation(
        conversation_id, after_seq, owner=caller.owner, all_versions=versions == "all"
    )
    return Conversation.model_validate(view)


@router.delete("/{conversation_id}", status_code=204, responses=documented(401, 404, 409, 422, 503))
async def delete_conversation(conversation_id: uuid.UUID, caller: Authenticated, api: Api) -> None:
    """Delete it with its turns, messages and events; 409 `conversation_busy` while a turn runs
    or waits (cancel it first)."""
    await api.chat.delete_conversation(conversation_id, owner=caller.owner)


@router.post(
    "/{conversation_id}/messages",
    status_code=202,
    response_model=Submission | TurnResult,
    responses=documented(
        400,
        401,
        404,
        409,
        413,
        415,
        422,
        429,
        503,
        also={
            200: {"model": TurnResult, "description": "?wait=true: the turn ended"},
            # No model of its own: the route's `Submission | TurnResult` (a wait that ran out
            # answers 202 with the TurnResult so far).
            202: {"description": "the turn is queued or running"},
        },
    ),
    openapi_extra=TAKES_FILES,
)
async def submit_message(
    conversation_id: uuid.UUID,
    *,
    body: MessageCreate,
    caller: Authenticated,
    api: Api,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    wait: Annotated[
        bool, Query(description="answer when the turn has ended (at most the server's wait)")
    ] = False,
) -> Submission | TurnResult:
    """The user's message as a new turn (202, `Location` names the turn). While a turn runs,
    `on_busy` decides: 409 `conversation_busy` naming it, queued behind it, interrupting it,
    rolling it back, or steering it (409 `not_branchable` while it waits for its client)."""
    client = api.chat

    async def submit() -> tuple[Submission, uuid.UUID]:
        # (the common submit on the event loop, the rest in the threadpool)
        submitted = await client.submit_message(
            conversation_id,
            body.text,
            idempotency_key=idempotency_key,
            on_busy=body.on_busy,
            owner=caller.owner,
            output_schema=body.output_schema,
            files=None
            if body.files is None
            else [item.model_dump(exclude_none=True) for item in body.files],
        )
        assert submitted.turn is not None
        response.headers["Location"] = f"/v1/turns/{submitted.turn.id}"
        if submitted.repeated:
            response.headers["Idempotent-Replayed"] = "true"
        return Submission.model_validate(submitted), submitted.turn.id

    if not wait:
        return (await submit())[0]
    # A long poll: counted with the streams, before anything is written (past the caps: 429 or
    # 503, nothing submitted).
    api.open_stream(caller.owner)
    try:
        _, turn_id = await submit()
        timeout = api.settings.api_max_wait_seconds
        log_interval = api.settings.api_log_poll_seconds
        result = await client.wait_for_turn(turn_id, timeout, log_interval=log_interval)
    finally:
        api.close_stream(caller.owner)
    # 200 once the turn rests: ended, or waiting for an answer (`requires_action`)
    response.status_code = 200 if result.finished or result.turn.status == REQUIRES_ACTION else 202
    return TurnResult.model_validate(result)


@router.post(
    "/{conversation_id}/retry",
    status_code=202,
    response_model=Submission,
    responses=documented(401, 404, 409, 422, 429, 503),
)
async def retry_conversation(
    conversation_id: uuid.UUID, caller: Authenticated, api: Api, response: Response
) -> Submission:
    """A new turn that continues a failed one from its transcript; 409 `not_retryable` unless
    the conversation failed."""
    submitted = await api.chat.retry_conversation(conversation_id, owner=caller.owner)
    assert submitted.turn is not None
    response.headers["Location"] = f"/v1/turns/{submitted.turn.id}"
    return Submission.model_validate(submitted)


@router.post(
    "/{conversation_id}/cancel",
    response_model=Turn | None,
    responses=CANCEL_RESPONSES,
)
async def cancel_current(
    conversation_id: uuid.UUID, caller: Authenticated, api: Api, response: Response
) -> Turn | None:
    """Stop the conversation's current turn (see POST /v1/turns/{id}/cancel); null before its
    first turn."""
    turn = await api.chat.cancel(conversation_id, owner=caller.owner)
    return None if turn is None else as_cancelled(turn, response)
