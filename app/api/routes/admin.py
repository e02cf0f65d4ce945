"""The operator routes (`/v1/admin`): every owner's runs, read and acted on by an operator's
credential only (`auth.Operating`: an owner's credential gets a 404 here, an operator's a 403 on
every owner route). Each action is written to the audit log in its own transaction
(`app/client/audit.py`); reading is not.

    GET  /v1/admin/turns/{id}                      any owner's turn (its conversation's owner)
    POST /v1/admin/turns/{id}/cancel               cancel it (audited: turn.cancel)
    POST /v1/admin/conversations/{id}/retry        retry a failed conversation (audited:
                                                   conversation.retry)
    GET  /v1/admin/audit                           the operators' actions, newest first
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from app.api.auth import Caller, Operating
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.routes.turns import CANCEL_RESPONSES, as_cancelled
from app.api.schemas import Submission, Turn
from app.api.state import Api
from app.client.audit import CONVERSATION_RETRY, TURN_CANCEL, AuditAction

router = APIRouter(prefix="/admin", tags=["operators"], route_class=GuardedRoute)


class AuditEntry(BaseModel):
    id: int
    at: datetime
    operator: str = Field(description="who acted: the operator key's name, or a token's sub")
    action: str = Field(description="turn.cancel | conversation.retry")
    target: str = Field(description="the turn's or conversation's id")
    selected: int = Field(description="how many runs the action acted on")
    detail: dict[str, Any]


class AuditPage(BaseModel):
    data: list[AuditEntry]
    next_before: int | None = Field(description="the next page: ?before= this (None: the end)")


def _acting(caller: Caller, action: str, target: uuid.UUID) -> AuditAction:
    return AuditAction(caller.owner or "(trusted)", action, str(target))


#: Every operator route: an owner's credential finds none (404, as a route that does not exist).
ADMIN = (401, 404, 422, 503)


@router.get("/turns/{turn_id}", response_model=Turn, responses=documented(*ADMIN))
async def get_any_turn(turn_id: uuid.UUID, caller: Operating, api: Api) -> Turn:
    """Any owner's turn: its status, error, usage and times."""
    return Turn.model_validate(await api.chat.get_turn(turn_id))


@router.post("/turns/{turn_id}/cancel", response_model=Turn, responses=CANCEL_RESPONSES)
async def cancel_any_turn(
    turn_id: uuid.UUID, caller: Operating, api: Api, response: Response
) -> Turn:
    """Stop any owner's turn, as its owner's cancel does (200 ended, 202 its worker told);
    written to the audit log with the operator's name."""
    turn = await api.chat.cancel_turn(turn_id, audit=_acting(caller, TURN_CANCEL, turn_id))
    return as_cancelled(turn, response)


@router.post(
    "/conversations/{conversation_id}/retry",
    status_code=202,
    response_model=Submission,
    responses=documented(*ADMIN, 409, 429),
)
async def retry_any_conversation(
    conversation_id: uuid.UUID, caller: Operating, api: Api, response: Response
) -> Submission:
    """A new turn that continues any owner's failed conversation (409 `not_retryable` unless it
    failed); written to the audit log with the operator's name."""
    audit = _acting(caller, CONVERSATION_RETRY, conversation_id)
    submitted = await api.chat.retry_conversation(conversation_id, audit=audit)
    assert submitted.turn is not None
    response.headers["Location"] = f"/v1/admin/turns/{submitted.turn.id}"
    return Submission.model_validate(submitted)


@router.get("/audit", response_model=AuditPage, responses=documented(*ADMIN, 400))
async def read_audit_log(
    caller: Operating,
    api: Api,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=1)] = None,
) -> AuditPage:
    """The operators' actions, newest first (reading them is not itself logged)."""
    entries = await api.chat.admin.audit_log(limit, before)
    return AuditPage(
        data=[AuditEntry.model_validate(entry, from_attributes=True) for entry in entries],
        next_before=entries[-1].id if len(entries) == limit else None,
    )
