"""The operator routes (`/v1/admin`): every owner's runs, read and acted on by an operator's
credential only (`auth.Operating`: an owner's credential gets a 404 here, an operator's a 403 on
every owner route). Each action is written to the audit log in its own transaction
(`app/client/audit.py`); reading is not.

    GET  /v1/admin/turns                           the runs across owners, filtered, newest first
                                                   (`app/client/runs.py` says each filter)
    GET  /v1/admin/turns/{id}                      any owner's turn (its conversation's owner)
    GET  /v1/admin/turns/{id}/timeline             its steps in order, with their times
                                                   (`app/client/timeline.py`)
    POST /v1/admin/turns/{id}/cancel               cancel it (audited: turn.cancel)
    POST /v1/admin/conversations/{id}/retry        retry a failed conversation (audited:
                                                   conversation.retry)
    POST /v1/admin/turns/bulk                      retry or cancel every run a filter selects: a
                                                   dry run (its count, a confirmation token),
                                                   then batches with the token (`bulk.py`)
    GET  /v1/admin/fleet                           the live workers, the queue, the last hour's
                                                   outcomes, failures by class, today's spend
    GET  /v1/admin/audit                           the operators' actions, newest first
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from app.api.auth import Caller, Operating
from app.api.gate import GuardedRoute
from app.api.problems import documented
from app.api.routes.turns import CANCEL_RESPONSES, as_cancelled
from app.api.schemas import Submission, Turn
from app.api.state import Api
from app.client import bulk
from app.client.audit import CONVERSATION_RETRY, TURN_CANCEL, AuditAction
from app.client.runs import MAX_PAGE, STATUSES, RunFilter
from app.client.timeline import as_json, timeline
from app.errors import InvalidRequest

router = APIRouter(prefix="/admin", tags=["operators"], route_class=GuardedRoute)


class AuditEntry(BaseModel):
    id: int
    at: datetime
    operator: str = Field(description="who acted: the operator key's name, or a token's sub")
    action: str = Field(description="turn.cancel | conversation.retry")
    target: str = Field(description="the turn's or conversation's id")
    selected: int = Field(description="how many runs the action acted on")
    detail: dict[str, Any]


class Run(BaseModel):
    turn_id: uuid.UUID
    conversation_id: uuid.UUID
    owner: str | None
    number: int
    status: str
    model: str | None
    error: str | None
    cost_usd: Decimal
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    iterations: int = Field(description="model calls of the running turn so far")
    worker: str | None = Field(description="the worker holding the running turn")
    heartbeat_age_s: float | None = Field(
        description="seconds since the running turn's worker last showed it is alive"
    )
    current: bool = Field(description="its conversation's current turn (none came after it)")


class RunPage(BaseModel):
    data: list[Run]
    next_before: uuid.UUID | None = Field(
        description="the next page: ?before= this (None: the end)"
    )


class AuditPage(BaseModel):
    data: list[AuditEntry]
    next_before: int | None = Field(description="the next page: ?before= this (None: the end)")


def _acting(caller: Caller, action: str, target: uuid.UUID) -> AuditAction:
    return AuditAction(caller.owner or "(trusted)", action, str(target))


#: Every operator route: an owner's credential finds none (404, as a route that does not exist).
ADMIN = (401, 404, 422, 503)


@router.get("/turns", response_model=RunPage, responses=documented(*ADMIN, 400))
async def list_runs(
    caller: Operating,
    api: Api,
    *,
    status: Annotated[str | None, Query(description=f"one of {', '.join(STATUSES)}")] = None,
    owner: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cost_above: Decimal | None = None,
    stuck_seconds: Annotated[float, Query(gt=0, le=86400)] = 60.0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    before: uuid.UUID | None = None,
) -> RunPage:
    """The turns of every owner a filter selects, newest first, each with its owner and, while
    it runs, its worker and its heartbeat's age (`stuck`: running, no heartbeat for
    `stuck_seconds`)."""
    wanted = RunFilter(status, owner, model, since, until, cost_above, stuck_seconds, limit, before)
    found = await api.chat.admin.list_runs(wanted)
    return RunPage(
        data=[Run.model_validate(run, from_attributes=True) for run in found],
        next_before=found[-1].turn_id if len(found) == limit else None,
    )


@router.get("/turns/{turn_id}", response_model=Turn, responses=documented(*ADMIN))
async def get_any_turn(turn_id: uuid.UUID, caller: Operating, api: Api) -> Turn:
    """Any owner's turn: its status, error, usage and times."""
    return Turn.model_validate(await api.chat.get_turn(turn_id))


class TimelineStep(BaseModel):
    kind: str = Field(
        description="queued | claimed | resumed | model_call | tool_call | paused "
        "| compacted | fallback | ended"
    )
    started_at: datetime
    ended_at: datetime
    duration_ms: int
    detail: dict[str, Any]


class Timeline(BaseModel):
    turn: Turn
    conversation_id: uuid.UUID
    owner: str | None
    steps: list[TimelineStep]


@router.get("/turns/{turn_id}/timeline", response_model=Timeline, responses=documented(*ADMIN))
async def turn_timeline(turn_id: uuid.UUID, caller: Operating, api: Api) -> Timeline:
    """What the turn did, step by step, and where its time went: each step bounded by the
    commits around it, in one read of its events."""
    record = await api.chat.turn_record(turn_id)
    return Timeline(
        turn=Turn.model_validate(record.turn),
        conversation_id=record.conversation.id,
        owner=record.conversation.owner,
        steps=[
            TimelineStep.model_validate(step)
            for step in as_json(timeline(record.turn, record.events))
        ],
    )


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


class BulkFilter(BaseModel, extra="forbid"):
    owner: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cost_above: Decimal | None = None


class BulkRequest(BaseModel, extra="forbid"):
    action: str = Field(description="retry (failed runs) | cancel (queued, running, waiting)")
    filter: BulkFilter = Field(default_factory=BulkFilter)
    confirm: str | None = Field(None, description="the dry run's token: act (None: dry run)")
    batch: int = Field(200, ge=1, le=1000, description="runs acted on by this call, at most")


class BulkAnswer(BaseModel):
    action: str
    selected: int = Field(description="runs the selection holds now")
    confirm: str = Field(description="the token: send it back to act, again until remaining is 0")
    done: int = 0
    skipped: int = 0
    remaining: int = Field(description="left for the next call with the token")


@router.post("/turns/bulk", response_model=BulkAnswer, responses=documented(*ADMIN, 400))
async def bulk_action(request: BulkRequest, caller: Operating, api: Api) -> BulkAnswer:
    """Retry or cancel every run a filter selects. Without `confirm`, a dry run: how many, and
    the token that confirms it (only runs created before now are ever selected). With it, at
    most `batch` of them, each action audited; call again with the same token until
    `remaining` is 0 (a call cut off midway is finished by the next)."""
    if request.confirm is None:
        wanted = RunFilter(**request.filter.model_dump())
        chosen = bulk.plan(request.action, wanted, datetime.now(UTC))
        selected = await bulk.count(api.chat, chosen)
        return BulkAnswer(
            action=chosen.action, selected=selected, confirm=chosen.token, remaining=selected
        )
    chosen = bulk.parse_token(request.confirm)
    if chosen.action != request.action:
        raise InvalidRequest(f"the token confirms a bulk {chosen.action}, not {request.action}")
    done = await bulk.run(api.chat, chosen, caller.owner or "(trusted)", request.batch)
    return BulkAnswer(confirm=request.confirm, **asdict(done))


class Worker(BaseModel):
    name: str = Field(description="its lease owner name: host:pid:...")
    token: int = Field(description="the liveness token it holds")
    since: datetime
    in_flight: int = Field(description="the runs it holds now")
    last_heartbeat: datetime | None


class Fleet(BaseModel):
    workers: list[Worker]
    queued: int = Field(description="runs waiting for a worker")
    oldest_queued_s: float | None = Field(description="the oldest queued run's wait")
    running: int = Field(description="runs a worker holds")
    outcomes_last_hour: dict[str, int]
    failures_last_day: list[tuple[str, int]] = Field(description="(error class, count)")
    spend_today: list[tuple[str, Decimal]] = Field(description="(owner, USD), most first")


@router.get("/fleet", response_model=Fleet, responses=documented(*ADMIN))
async def read_fleet(caller: Operating, api: Api) -> Fleet:
    """The fleet now, from what the database keeps (no background job): who works, what waits,
    how the last hour went, what failed, who spends."""
    return Fleet.model_validate(await api.chat.admin.fleet(), from_attributes=True)


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
