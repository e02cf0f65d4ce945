"""Turns: read one, answer what it waits for, cancel one."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response

from app.api.auth import Authenticated
from app.api.bodies import ActionOutput, ActionsSubmit
from app.api.gate import TAKES_OUTPUTS, GuardedRoute
from app.api.problems import documented
from app.api.schemas import Turn
from app.api.state import Api
from app.client import Decision, TurnView
from app.errors import InvalidRequest

router = APIRouter(prefix="/turns", tags=["turns"], route_class=GuardedRoute)

#: A cancel answers 200 with a turn that has ended, 202 with one whose worker is being told.
CANCEL_RESPONSES = documented(
    401,
    404,
    422,
    503,
    also={202: {"model": Turn, "description": "asked: the worker ends it in moments"}},
)


def as_cancelled(turn: TurnView, response: Response) -> Turn:
    """The turn a cancel left, 202 while it still runs."""
    if not turn.is_finished:
        response.status_code = 202
    return Turn.model_validate(turn)


@router.get("/{turn_id}", response_model=Turn, responses=documented(401, 404, 422, 503))
async def get_turn(turn_id: uuid.UUID, caller: Authenticated, api: Api) -> Turn:
    """Its status, error, usage and times."""
    turn = await api.chat.get_turn(turn_id, owner=caller.owner)
    return Turn.model_validate(turn)


@router.post(
    "/{turn_id}/cancel",
    response_model=Turn,
    responses=CANCEL_RESPONSES,
)
async def cancel_turn(
    turn_id: uuid.UUID, caller: Authenticated, api: Api, response: Response
) -> Turn:
    """Stop the turn: 200 when it has ended (a finished turn comes back unchanged: asking twice
    is harmless), 202 while its worker is told (`cancel_requested_at` set; `turn.cancelled`
    follows in moments). A waiting turn is cancelled when its time comes, before any model
    call."""
    return as_cancelled(await api.chat.cancel_turn(turn_id, owner=caller.owner), response)


@router.post(
    "/{turn_id}/actions",
    response_model=Turn,
    responses=documented(400, 401, 404, 409, 413, 422, 503),
    openapi_extra=TAKES_OUTPUTS,
)
async def answer_actions(
    turn_id: uuid.UUID, body: ActionsSubmit, caller: Authenticated, api: Api
) -> Turn:
    """Answer what the turn waits for (`requires_action`), by call id: a client tool's output,
    the user's answer to the model's question (`agent_clarify`), or an approval (`approve`:
    true runs the call; false, with an optional `reason`, tells the model it was denied).
    When none is left waiting, the turn goes on (`status` running). Idempotent by call id:
    the same answer again writes nothing; 404 `action_not_found` for a call the turn never
    waited on, 409 `action_already_answered` for one answered otherwise (or cancelled). All
    or nothing."""
    outputs: dict[str, str] = {}
    approvals: dict[str, Decision] = {}
    for answer in body.outputs:
        if answer.call_id in outputs or answer.call_id in approvals:
            raise InvalidRequest(f"call {answer.call_id!r} is answered twice")
        if isinstance(answer, ActionOutput):
            outputs[answer.call_id] = answer.output
        else:
            approvals[answer.call_id] = Decision(answer.approve, answer.reason)
    turn = await api.chat.answer_actions(turn_id, outputs, approvals=approvals, owner=caller.owner)
    return Turn.model_validate(turn)
