"""The conversation UPDATEs of a turn's lease, built once at import: every write a running worker
makes, fenced by the epoch its claim granted (the claim itself, and the reads that go with it, are
in `claim_statements`). (What each one also writes about the turn, the transcript and the event
log is in `journal`.)

Each rule is written once and shared by every statement that needs it:

    FENCE           WHERE id = :fence_id AND lease_epoch = :fence_epoch; zero rows means another
                    worker claimed the conversation since: the write did not happen
    PROGRESS        a committed step renews the lease and resets the attempt count
    RELEASED_LEASE  no worker holds the conversation (app.models; the web app writes it too)
    NEXT_TURN       a turn ends: if another was submitted meanwhile (turn_count > turn_number), the
                    conversation moves to it and stays `processing`, else it rests. Decided from
                    the row's own counters, never from a subquery: an UPDATE that waited for the
                    row lock behind a submit sees the submit's row, but its subqueries still see
                    the statement's older snapshot, without the new turn (it would be forgotten)
    CANCEL_ASKED    every fenced UPDATE also returns whether the user asked to cancel the lease
                    holder's turn, so a worker learns of a cancel at its next step or heartbeat
                    even when the live notice never reached it
    EVENTS          every UPDATE takes the seqs of the events it appends from `event_seq`, so the
                    row lock orders the log exactly as the commits
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Integer,
    Numeric,
    String,
    Text,
    Update,
    Uuid,
    and_,
    bindparam,
    case,
    literal,
    select,
    update,
)

from app.models import (
    FAILED,
    IDLE,
    PROCESSING,
    RELEASED_LEASE,
    TOOL_LOOP,
)
from app.models.tables import conversations, turns

c = conversations.c

NOW = bindparam("now", type_=DateTime(timezone=True))
EXPIRES = bindparam("expires", type_=DateTime(timezone=True))
# The status the lease holder last committed: a step logs `status.changed` only when it differs.
OLD_STATUS = bindparam("old_status", type_=String)

FENCE = and_(c.id == bindparam("fence_id"), c.lease_epoch == bindparam("fence_epoch"))
PROGRESS = {"lease_expires_at": EXPIRES, "attempts": 0}
TURN_ID = bindparam("turn_id", type_=Uuid)  # the turn the lease holder is running
NEXT_TURN = c.turn_count > c.turn_number
CANCEL_ASKED = (
    select(turns.c.cancel_requested_at.is_not(None))
    .where(turns.c.id == TURN_ID)
    .scalar_subquery()
    .label("cancel_requested")
)
TOUCHED = {"heartbeat_at": NOW, "updated_at": NOW}  # every write is a sign of life
ADD_PROMPT = bindparam("add_prompt_tokens", type_=Integer)
ADD_COMPLETION = bindparam("add_completion_tokens", type_=Integer)
ADD_COST = bindparam("add_cost_usd", type_=Numeric(20, 10))  # NULL: unknown, and so the total
ADD_CACHED = bindparam("add_cached_tokens", type_=Integer)
_COUNTED = {
    "prompt_tokens": c.prompt_tokens + ADD_PROMPT,
    "completion_tokens": c.completion_tokens + ADD_COMPLETION,
    "cost_usd": c.cost_usd + ADD_COST,
    "cached_tokens": c.cached_tokens + ADD_CACHED,
}

#: What every fenced UPDATE returns; the statements that depend on it read these.
SOURCE = (c.id, c.event_seq, c.status, c.lease_epoch)


def _fenced(events: int | ColumnElement[int] = 0, /, **values: Any) -> Update:
    if not isinstance(events, int) or events:
        values["event_seq"] = c.event_seq + events
    return (
        update(conversations)
        .where(FENCE)
        .values(**TOUCHED, **values)
        .returning(*SOURCE, CANCEL_ASKED, c.turn_count)
    )


def _changes(status: ColumnElement[str]) -> ColumnElement[int]:
    """1 when the step moves the conversation to another status (one more event), else 0."""
    return case((status != OLD_STATUS, 1), else_=0)


def _ending(rest_status: str, *, counted: bool, **values: Any) -> dict[str, Any]:
    """The values of a turn's end: rest in `rest_status`, or move on to the next turn."""
    iterations = c.iterations + 1 if counted else c.iterations
    return {
        "status": ending_status(rest_status),
        "turn_number": c.turn_number + case((NEXT_TURN, 1), else_=0),
        "iterations": case((NEXT_TURN, 0), else_=iterations),
        "attempts": 0,
        **RELEASED_LEASE,
        **values,
    }


def ending_status(rest_status: str) -> ColumnElement[str]:
    """`processing` when another turn waits, else `rest_status`."""
    return case((NEXT_TURN, literal(PROCESSING)), else_=literal(rest_status))


# --- fenced updates on their own --------------------------------------------------------------


class Write(enum.Enum):
    HEARTBEAT = "heartbeat"  # the lease renewed while the model or a tool is slow
    RELEASE = "release"  # the lease given up (shutdown): another worker may claim at once
    FINISH = "finish"  # the final text is already committed: the turn completes
    FAIL = "fail"  # the turn failed with a readable error; a failed call's tokens still count
    CANCEL = "cancel"  # the user cancelled the turn and every call is answered
    PAUSE = "pause"  # every open call waits for the user: the turn requires action, lease freed
    STARTING = "starting"  # a call that may not run twice is about to run (`in_flight`)
    COMPACT = "compact"  # what the model is sent was compacted (`compactions`): a step
    STEER = "steer"  # a steer message taken in: its turn carries the run on (plan row 26)
    FALLBACK = "fallback"  # the turn moves to its next model (`model.fallback`): a step


ERROR = bindparam("error", type_=Text)

HEADS: dict[Any, Update] = {
    Write.HEARTBEAT: _fenced(lease_expires_at=EXPIRES),
    Write.STARTING: _fenced(
        lease_expires_at=EXPIRES, in_flight=bindparam("in_flight", type_=String)
    ),
    Write.RELEASE: _fenced(**RELEASED_LEASE),
    # turn.completed / turn.failed, and status.changed unless the status stays
    Write.FINISH: _fenced(1 + _changes(ending_status(IDLE)), **_ending(IDLE, counted=False)),
    Write.FAIL: _fenced(
        1 + _changes(ending_status(FAILED)),
        **_ending(
            FAILED,
            counted=False,
            error=case((NEXT_TURN, None), else_=ERROR),
            **_COUNTED,
        ),
    ),
    # model.fallback: a step (the lease renewed); the failed call's tokens count
    Write.FALLBACK: _fenced(1, **PROGRESS, **_COUNTED),
    # context.compacted: a step (the lease renewed); a summary's model call counted
    Write.COMPACT: _fenced(1, **PROGRESS, **_COUNTED),
    # turn.completed (the steered turn), message.committed, turn.started (the steer turn), and
    # status.changed unless the status stays: a user message waits for the model (`processing`).
    # Only while the next turn is that steer turn, still waiting (only the lease holder moves
    # `turn_number`, so this is so unless the lease was lost).
    Write.STEER: _fenced(
        3 + _changes(literal(PROCESSING)),
        status=PROCESSING,
        turn_number=c.turn_number + 1,
        **PROGRESS,
    ).where(
        select(turns.c.id)
        .where(
            turns.c.id == TURN_ID,
            turns.c.conversation_id == c.id,
            turns.c.number == c.turn_number + 1,
        )
        .exists()
    ),
    # action.required, and status.changed unless the status stays: the conversation rests with
    # its turn still current (a later turn keeps waiting behind it), nothing counted.
    Write.PAUSE: _fenced(1 + _changes(literal(IDLE)), status=IDLE, attempts=0, **RELEASED_LEASE),
    # turn.cancelled, and status.changed unless the status stays; a failed call's tokens count
    Write.CANCEL: _fenced(
        1 + _changes(ending_status(IDLE)), **_ending(IDLE, counted=False, **_COUNTED)
    ),
}


# --- steps: a message and the conversation's state, atomically -------------------------------


class StepKind(enum.Enum):
    TOOL_CALLS = "tool_calls"  # the assistant asks for tools: tool_loop, one LLM call counted
    TOOL_RESULT = "tool_result"  # one tool's result: tool_loop
    TOOL_OUTPUT = "tool_output"  # an MCP call's result, its whole output kept (tool_outputs)
    ANSWER = "answer"  # the final text: the turn completes, one LLM call counted
    # A structured answer that does not match its schema: kept (`is_error`), one LLM call
    # counted, and the conversation `processing` while the model is asked to repair it.
    REFUSED = "refused"
    # The same two steps when they move the conversation from `processing` into `tool_loop`:
    # one more event (status.changed). The worker knows which before the statement runs, so
    # each statement's events are fixed rows, with no condition to evaluate.
    TOOL_CALLS_ENTERING = "tool_calls_entering"
    TOOL_RESULT_ENTERING = "tool_result_entering"
    TOOL_OUTPUT_ENTERING = "tool_output_entering"


#: The step that also logs the move into `tool_loop`, for a step taken from another status.
ENTERING = {
    StepKind.TOOL_CALLS: StepKind.TOOL_CALLS_ENTERING,
    StepKind.TOOL_RESULT: StepKind.TOOL_RESULT_ENTERING,
    StepKind.TOOL_OUTPUT: StepKind.TOOL_OUTPUT_ENTERING,
}

_ITERATION = {"iterations": c.iterations + 1, **_COUNTED}
# message.committed, and status.changed when the conversation was `processing` before
for _kind, _entering in ENTERING.items():
    _counted = _ITERATION if _kind is StepKind.TOOL_CALLS else {}
    HEADS[_kind] = _fenced(1, status=TOOL_LOOP, **PROGRESS, **_counted)
    HEADS[_entering] = _fenced(2, status=TOOL_LOOP, **PROGRESS, **_counted)
# message.committed, turn.completed, and status.changed unless the status stays
HEADS[StepKind.ANSWER] = _fenced(
    2 + _changes(ending_status(IDLE)), **_ending(IDLE, counted=True, **_COUNTED)
)
# message.committed, and status.changed unless the status stays
HEADS[StepKind.REFUSED] = _fenced(
    1 + _changes(literal(PROCESSING)), status=PROCESSING, **PROGRESS, **_ITERATION
)


# --- parameters -------------------------------------------------------------------------------


def fence_parameters(
    fence_id: Any, fence_epoch: int, *, now: datetime, ttl: float | None = None
) -> dict[str, Any]:
    """What every fenced statement binds: the fence, the time, and the lease's new end."""
    return {
        "fence_id": fence_id,
        "fence_epoch": fence_epoch,
        "now": now,
        "expires": now + timedelta(seconds=ttl) if ttl is not None else None,
    }


__all__ = [
    "ADD_CACHED",
    "ADD_COMPLETION",
    "ADD_COST",
    "ADD_PROMPT",
    "CANCEL_ASKED",
    "ENTERING",
    "ERROR",
    "EXPIRES",
    "FENCE",
    "HEADS",
    "NEXT_TURN",
    "NOW",
    "OLD_STATUS",
    "PROGRESS",
    "SOURCE",
    "TOUCHED",
    "TURN_ID",
    "StepKind",
    "Write",
    "ending_status",
    "fence_parameters",
]
