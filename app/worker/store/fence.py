"""The conversation UPDATEs of a turn's lease, built once at import: the claim that grants an
epoch, and every write a running worker makes, fenced by that epoch. (What each one also writes
about the turn, the transcript and the event log is in `journal`.)

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
    cast,
    func,
    literal,
    or_,
    select,
    update,
)

from app.models import (
    FAILED,
    FOR_STEER,
    IDLE,
    OWNER_LOCK_SEED,
    PROCESSING,
    QUEUED,
    RELEASED_LEASE,
    RUNNING_STATUSES,
    TOOL_LOOP,
)
from app.models.tables import budgets as _budgets
from app.models.tables import compactions, conversations, messages, turns
from app.worker.store import tree
from app.worker.store.liveness import TOKEN_GONE

c = conversations.c

NOW = bindparam("now", type_=DateTime(timezone=True))
_EXPIRES = bindparam("expires", type_=DateTime(timezone=True))
# The status the lease holder last committed: a step logs `status.changed` only when it differs.
OLD_STATUS = bindparam("old_status", type_=String)

FENCE = and_(c.id == bindparam("fence_id"), c.lease_epoch == bindparam("fence_epoch"))
PROGRESS = {"lease_expires_at": _EXPIRES, "attempts": 0}
TURN_ID = bindparam("turn_id", type_=Uuid)  # the turn the lease holder is running
NEXT_TURN = c.turn_count > c.turn_number
CANCEL_ASKED = (
    select(turns.c.cancel_requested_at.is_not(None))
    .where(turns.c.id == TURN_ID)
    .scalar_subquery()
    .label("cancel_requested")
)
_TOUCHED = {"heartbeat_at": NOW, "updated_at": NOW}  # every write is a sign of life
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
        .values(**_TOUCHED, **values)
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


# --- the claim --------------------------------------------------------------------------------

# The conversation's current turn and the seq its waiting message would take, as of the
# statement's snapshot. The claim only succeeds while that turn is still the current one: a turn
# that ended while the claim waited for the row moved `turn_number` on (a later claim starts it).
_snapshot = conversations.alias("snapshot")
CURRENT_TURN = (
    select(
        turns.c.id,
        turns.c.number,
        turns.c.started_at,
        turns.c.input,
        turns.c.cancel_requested_at,
        turns.c.actions,
        turns.c.trace_context,
        turns.c.parent_seq,
        turns.c.message_seq,
        turns.c.output_schema,
        turns.c.model,
        turns.c.files,
        select(func.coalesce(func.max(messages.c.seq), 0) + 1)
        .where(messages.c.conversation_id == bindparam("claim_id"))
        .scalar_subquery()
        .label("next_message_seq"),
    )
    .where(
        turns.c.conversation_id == bindparam("claim_id"),
        # An alias: the UPDATE's own table would be correlated (the new row, not the snapshot's).
        turns.c.number
        == select(_snapshot.c.turn_number)
        .where(_snapshot.c.id == bindparam("claim_id"))
        .scalar_subquery(),
    )
    .cte("current_turn")
)


def _current(column: str) -> Any:
    return select(CURRENT_TURN.c[column]).scalar_subquery()


# Nobody holds the lease: released, expired, or held by a process the database saw die (its
# liveness token is gone, `liveness.TOKEN_GONE`: checked only when the first two fail).
LEASE_FREE = or_(c.lease_owner.is_(None), c.lease_expires_at < NOW, TOKEN_GONE)

_ACTIVE = and_(messages.c.conversation_id == bindparam("claim_id"), messages.c.active)
# The newest message of the active path: where a message that waited outside the transcript
# hangs, unless its turn says where (an edit, a rollback).
LEAF = select(func.max(messages.c.seq)).where(_ACTIVE).scalar_subquery()
# The deepest message a compaction's state refers to: it applies to a path that holds it.
_ANCHOR = case(
    (compactions.c.elided_through > compactions.c.summarized_through, compactions.c.elided_through),
    else_=compactions.c.summarized_through,
)


def _compacted(column: str) -> Any:
    """A column of the latest compaction of the active path (NULL: it was never compacted); a
    compaction of another branch does not apply (its anchor is not on the path)."""
    on_path = select(messages.c.seq).where(_ACTIVE, messages.c.seq == _ANCHOR).exists()
    return (
        select(compactions.c[column])
        .where(compactions.c.conversation_id == bindparam("claim_id"), on_path)
        .order_by(compactions.c.number.desc())
        .limit(1)
        .scalar_subquery()
        .label(f"compacted_{column}")
    )


_PROMOTES = _current("input").is_not(None)  # the turn's message waited outside the transcript
_FIRST = _current("started_at").is_(None)  # the turn's first claim: it starts now
# A turn that says where its messages hang (an edit, a regenerate, a rollback, queued behind
# another) makes the active path end there as it starts, on whichever branch that is (`tree`).
# (Idempotent: a turn whose path the web side already moved finds it ending there.)
CUT_AT = func.coalesce(_current("message_seq"), _current("parent_seq"))
CUTS = and_(_FIRST, _current("parent_seq").is_not(None), tree.moves(bindparam("claim_id"), CUT_AT))
# What the claim reads of the latest compaction of the path (`context.Compacted`'s state; its
# `number` is the conversation's last, `compacted_top`, over every branch).
COMPACTED_COLUMNS = ("elided_through", "summarized_through", "summary")

CLAIM = (
    update(conversations)
    .where(
        c.id == bindparam("claim_id"),
        # Plain parameters, not an expanding IN: the text is compiled once, values never change.
        c.status.in_([literal(status) for status in RUNNING_STATUSES]),
        LEASE_FREE,
        c.turn_number == _current("number"),
    )
    .values(
        lease_owner=bindparam("claim_owner", type_=String),
        lease_token=bindparam("claim_token", type_=Integer),
        lease_epoch=c.lease_epoch + 1,
        lease_expires_at=_EXPIRES,
        attempts=c.attempts + 1,
        taken_over=c.lease_owner.is_not(None),  # (the WHERE: its lease had expired, or its
        # holder died)
        # turn.started or turn.resumed, after the promoted message's message.committed, after
        # the cut path's branch.switched
        event_seq=c.event_seq + 1 + case((_PROMOTES, 1), else_=0) + case((CUTS, 1), else_=0),
        **_TOUCHED,
    )
    .returning(
        *SOURCE,
        c.model,
        c.instructions,
        c.allowed_tools,
        c.tool_choice,
        c.iterations,
        c.attempts,
        _current("id").label("turn_id"),
        _FIRST.label("turn_first"),
        _current("input").label("turn_input"),
        _current("next_message_seq").label("message_seq"),
        _current("cancel_requested_at").is_not(None).label("cancel_requested"),
        c.client_tools,
        c.clarify,
        c.approval_tools,
        _current("actions").label("turn_actions"),
        c.in_flight,
        c.taken_over,
        _current("trace_context").label("trace_context"),
        # whether a budget applies: then the worker checks it before each model call
        # (by the claimed id and an alias: SQLite writes RETURNING's columns unqualified)
        select(_budgets.c.id)
        .where(
            or_(
                _budgets.c.conversation_id == bindparam("claim_id"),
                _budgets.c.owner
                == select(_snapshot.c.owner)
                .where(_snapshot.c.id == bindparam("claim_id"))
                .scalar_subquery(),
            )
        )
        .exists()
        .label("budgeted"),
        c.context_policy,
        *(_compacted(column) for column in COMPACTED_COLUMNS),
        # the conversation's last compaction number, of any branch: the next one's is past it
        select(func.max(compactions.c.number))
        .where(compactions.c.conversation_id == bindparam("claim_id"))
        .scalar_subquery()
        .label("compacted_top"),
        _current("parent_seq").label("turn_parent"),
        CUTS.label("cuts"),
        CUT_AT.label("cut_at"),
        LEAF.label("leaf"),
        c.turn_number,
        c.turn_count,
        # the call ids other branches' results took: a new call's id is made unique against
        # them too (the results' unique constraint spans the tree)
        tree.other_branch_calls(bindparam("claim_id"), CUTS).label("other_branch_calls"),
        # what its answer must match (a message's own schema over the conversation's), and the
        # model it moved to when one failed (a fallback), with the conversation's list of them
        _current("output_schema").label("turn_output_schema"),
        c.output_schema,
        _current("model").label("turn_model"),
        c.fallback_models,
        # the files of a message that waited outside the transcript (they go in with it)
        _current("files").label("turn_files"),
    )
    .add_cte(CURRENT_TURN)
)

# Per-owner limits (`CHATWORKER_OWNER_MAX_RUNNING_TURNS`): the claim also needs fewer than
# `owner_limit` of the owner's other conversations to hold a live lease. On PostgreSQL the claim
# runs after OWNER_LOCK in one transaction, so two claims for one owner see each other's lease
# (the second statement starts after the first commits); SQLite has one writer at a time.
_others = conversations.alias("others")
UNDER_OWNER_LIMIT = or_(
    c.owner.is_(None),
    select(func.count())
    .select_from(_others)
    .where(
        _others.c.owner == c.owner,
        _others.c.id != c.id,
        _others.c.status.in_([literal(status) for status in RUNNING_STATUSES]),
        _others.c.lease_owner.is_not(None),
        _others.c.lease_expires_at >= NOW,
    )
    .scalar_subquery()
    < bindparam("owner_limit", type_=Integer),
)
CLAIM_LIMITED = CLAIM.where(UNDER_OWNER_LIMIT)
OWNER_LOCK = select(
    func.pg_advisory_xact_lock(func.hashtextextended(c.owner, OWNER_LOCK_SEED))
).where(c.id == bindparam("claim_id"), c.owner.is_not(None))
# A claim the limit refused: the conversation waits for its owner's turn. Touching its
# heartbeat says a worker saw it (the janitor leaves it alone; the sweep rings it again later).
DEFERRED = (
    update(conversations)
    .where(
        c.id == bindparam("claim_id"),
        c.status.in_([literal(status) for status in RUNNING_STATUSES]),
        LEASE_FREE,
    )
    .values(heartbeat_at=NOW)
    .returning(c.id)
)

# The turn waiting right behind the current one, when it is a steer message (plan row 26).
_next = conversations.alias("next_of")
NEXT_STEER = select(turns.c.id, turns.c.input, cast(turns.c.files, Text).label("files")).where(
    turns.c.conversation_id == bindparam("steer_conversation"),
    turns.c.kind == FOR_STEER,
    turns.c.status == QUEUED,
    # (a steer message the user cancelled is not taken in: its turn is ended at its claim)
    turns.c.cancel_requested_at.is_(None),
    turns.c.number
    == select(_next.c.turn_number + 1)
    .where(_next.c.id == bindparam("steer_conversation"))
    .scalar_subquery(),
)

# tool_calls comes back as text, parsed by the caller: a driver's JSON loader costs ~4 us a value.
TRANSCRIPT = (
    select(
        messages.c.seq,
        messages.c.role,
        messages.c.content,
        cast(messages.c.tool_calls, Text).label("tool_calls"),
        messages.c.tool_call_id,
        messages.c.tool_name,
        messages.c.is_error,
        messages.c.finish_reason,
        messages.c.output_error,
        cast(messages.c.files, Text).label("files"),
    )
    .where(
        messages.c.conversation_id == bindparam("transcript_id"),
        # The active path only: nothing of another branch is ever sent to the model.
        messages.c.active,
        # What a process kept of it between turns ends there (`history.Histories`), read again:
        # still on the path, it is the first row; else the kept transcript is of another branch.
        messages.c.seq >= bindparam("transcript_after", type_=Integer),
    )
    .order_by(messages.c.seq)
)


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
    Write.HEARTBEAT: _fenced(lease_expires_at=_EXPIRES),
    Write.STARTING: _fenced(
        lease_expires_at=_EXPIRES, in_flight=bindparam("in_flight", type_=String)
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
    "CLAIM",
    "CLAIM_LIMITED",
    "CURRENT_TURN",
    "CUTS",
    "CUT_AT",
    "DEFERRED",
    "ENTERING",
    "ERROR",
    "FENCE",
    "HEADS",
    "LEAF",
    "NEXT_STEER",
    "NEXT_TURN",
    "NOW",
    "OLD_STATUS",
    "OWNER_LOCK",
    "PROGRESS",
    "SOURCE",
    "TRANSCRIPT",
    "TURN_ID",
    "StepKind",
    "Write",
    "ending_status",
    "fence_parameters",
]
