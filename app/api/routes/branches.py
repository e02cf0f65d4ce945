"""The conversation's tree: edit a message, regenerate an answer, switch the active path, fork
into a new conversation. Thin routes over `AsyncChatClient` (`client/branching.py` has the
table)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Response

from app.api.auth import Authenticated
from app.api.bodies import MAX_SEQ, BranchSwitch, Fork, MessageEdit, Regenerate
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.routes.conversations import IdempotencyKey
from app.api.schemas import Conversation, Submission
from app.api.state import Api
from app.client import Submitted

router = APIRouter(prefix="/conversations", tags=["conversations"], route_class=GuardedRoute)

Seq = Annotated[int, Path(ge=1, le=MAX_SEQ, description="a message's seq")]


@router.post(
    "/{conversation_id}/messages/{seq}/edit",
    status_code=202,
    response_model=Submission,
    responses=documented(400, 401, 404, 409, 413, 422, 429, 503),
)
async def edit_message(
    conversation_id: uuid.UUID,
    seq: Seq,
    *,
    body: MessageEdit,
    caller: Authenticated,
    api: Api,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> Submission:
    """A new version of the user message `seq` of any branch (a sibling) with `text`, after the
    messages before it on its own path, made the end of the active path; a turn runs on it
    (202). The old version stays. 404 `message_not_found`; 409 `not_branchable` for a message
    that is not the user's, `conversation_busy` per `on_busy`."""
    submitted = await api.chat.edit_message(
        conversation_id,
        seq,
        body.text,
        idempotency_key=idempotency_key,
        on_busy=body.on_busy,
        owner=caller.owner,
    )
    return _accepted(submitted, response)


@router.post(
    "/{conversation_id}/regenerate",
    status_code=202,
    response_model=Submission,
    responses=documented(400, 401, 404, 409, 422, 429, 503),
)
async def regenerate(
    conversation_id: uuid.UUID,
    *,
    body: Regenerate,
    caller: Authenticated,
    api: Api,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> Submission:
    """A new answer to the user message at or above `seq` on `seq`'s own path, whichever branch
    (omitted: the last one): a turn runs from it again (202); its answer is a new version of
    the old one, which stays."""
    submitted = await api.chat.regenerate(
        conversation_id,
        body.seq,
        idempotency_key=idempotency_key,
        on_busy=body.on_busy,
        owner=caller.owner,
    )
    return _accepted(submitted, response)


@router.post(
    "/{conversation_id}/switch",
    response_model=Conversation,
    responses=documented(400, 401, 404, 409, 422, 503),
)
async def switch_branch(
    conversation_id: uuid.UUID, body: BranchSwitch, caller: Authenticated, api: Api
) -> Conversation:
    """Show the version holding message `seq`: the active path goes to the newest message under
    it (the version's latest state); no turn runs. 409 `conversation_busy` while a turn runs or
    waits. Followers hear `branch.switched`. The conversation with its new path."""
    view = await api.chat.switch_branch(conversation_id, body.seq, owner=caller.owner)
    return Conversation.model_validate(view)


@router.post(
    "/{conversation_id}/fork",
    status_code=201,
    response_model=Conversation,
    responses=documented(400, 401, 404, 409, 413, 422, 429, 503),
)
async def fork_conversation(
    conversation_id: uuid.UUID, body: Fork, caller: Authenticated, api: Api, response: Response
) -> Conversation:
    """A new conversation of yours, set up as this one, holding a copy of its path up to `seq`
    (omitted: all of it), idle (201, `Location` names it). 409 `not_branchable` at a message
    whose tool calls have no results up to it; `conversation_conflict` for a taken `id`; 429
    `storage_quota_exceeded` when the copy would take you past your storage quota (413
    `larger_than_storage_quota` when it alone holds more)."""
    view = await api.chat.fork_conversation(
        conversation_id, body.seq, new_id=body.id, owner=caller.owner
    )
    response.headers["Location"] = f"/v1/conversations/{view.id}"
    return Conversation.model_validate(view)


def _accepted(submitted: Submitted, response: Response) -> Submission:
    assert submitted.turn is not None
    response.headers["Location"] = f"/v1/turns/{submitted.turn.id}"
    if submitted.repeated:
        response.headers["Idempotent-Replayed"] = "true"
    return Submission.model_validate(submitted)


__all__ = ["router"]
