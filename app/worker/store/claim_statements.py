"""The claim's statements, built once at import: the claim that grants a lease epoch (its
owner-limited variant, the owner's lock before it, the deferral when only the limit stood in the
way), and the reads that go with a claim: the transcript of the active path and the steer message
waiting behind the running turn. (What a claim also writes is in `journal`; every later write,
fenced by the epoch, is in `fence`.)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Integer,
    String,
    Text,
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

from app.models import FOR_STEER, OWNER_LOCK_SEED, QUEUED, RUNNING_STATUSES
from app.models.tables import budgets as _budgets
from app.models.tables import compactions, conversations, messages, turns
from app.worker.store import tree
from app.worker.store.fence import EXPIRES, NOW, SOURCE, TOUCHED
from app.worker.store.liveness import TOKEN_GONE

c = conversations.c

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
        lease_expires_at=EXPIRES,
        attempts=c.attempts + 1,
        taken_over=c.lease_owner.is_not(None),  # (the WHERE: its lease had expired, or its
        # holder died)
        # turn.started or turn.resumed, after the promoted message's message.committed, after
        # the cut path's branch.switched
        event_seq=c.event_seq + 1 + case((_PROMOTES, 1), else_=0) + case((CUTS, 1), else_=0),
        **TOUCHED,
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
        c.forced_tool,
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


__all__ = [
    "CLAIM",
    "CLAIM_LIMITED",
    "CURRENT_TURN",
    "CUTS",
    "CUT_AT",
    "DEFERRED",
    "LEAF",
    "NEXT_STEER",
    "OWNER_LOCK",
    "TRANSCRIPT",
]
