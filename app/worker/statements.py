"""The SQL of the hot path, built once at import: a step pays no statement construction.

A step commit is the fenced conversation UPDATE plus the message INSERT. On PostgreSQL the two are
one statement (`WITH fenced AS (UPDATE ... RETURNING id) INSERT ... SELECT ... FROM fenced`), run in
autocommit: one round trip, one transaction, and no row inserted unless the fence matched. Other
databases run `fence_update(kind)` and `INSERT_MESSAGE` in one transaction. `step_parameters` fills
the bind parameters of all three.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Insert,
    Integer,
    String,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    cast,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.models import IDLE, RUNNING_STATUSES, TOOL_LOOP, Conversation, Message
from app.worker.plan import Entry
from app.worker.ports import Usage

conversations = typed(Table, Conversation.__table__)
messages = typed(Table, Message.__table__)
c = conversations.c


class StepKind(enum.Enum):
    TOOL_CALLS = (
        "tool_calls"  # the assistant asks for tools: status tool_loop, one LLM call counted
    )
    TOOL_RESULT = "tool_result"  # one tool's result: status tool_loop
    ANSWER = "answer"  # the final text: status idle, lease released, one LLM call counted


_NOW = bindparam("now", type_=DateTime(timezone=True))
_EXPIRES = bindparam("expires", type_=DateTime(timezone=True))
_FENCE = and_(c.id == bindparam("fence_id"), c.lease_epoch == bindparam("fence_epoch"))

# A committed step is progress: it renews the lease and clears the crash-attempt count.
_RENEWED = {"lease_expires_at": _EXPIRES, "attempts": 0}
_COUNTED = {
    "iterations": c.iterations + 1,
    "prompt_tokens": c.prompt_tokens + bindparam("add_prompt_tokens", type_=Integer),
    "completion_tokens": c.completion_tokens + bindparam("add_completion_tokens", type_=Integer),
}
_SET: dict[StepKind, dict[str, Any]] = {
    StepKind.TOOL_CALLS: {"status": TOOL_LOOP, **_RENEWED, **_COUNTED},
    StepKind.TOOL_RESULT: {"status": TOOL_LOOP, **_RENEWED},
    StepKind.ANSWER: {"status": IDLE, "lease_owner": None, "lease_expires_at": None, **_COUNTED},
}

# The message's columns and their parameters; None is SQL NULL, not JSON null.
_NULLABLE_JSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
_MESSAGE_PARAMS = {
    "seq": bindparam("m_seq", type_=Integer),
    "role": bindparam("m_role", type_=String),
    "content": bindparam("m_content", type_=Text),
    "tool_calls": bindparam(
        "m_tool_calls",
        type_=JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql"),
    ),
    "tool_call_id": bindparam("m_tool_call_id", type_=String),
    "tool_name": bindparam("m_tool_name", type_=String),
    "is_error": bindparam("m_is_error", type_=Boolean),
    "finish_reason": bindparam("m_finish_reason", type_=String),
}


def _fence_update(kind: StepKind) -> Update:
    values = {"heartbeat_at": _NOW, "updated_at": _NOW, **_SET[kind]}
    return update(conversations).where(_FENCE).values(**values)


def _one_statement(kind: StepKind) -> Insert:
    fenced = _fence_update(kind).returning(c.id).cte("fenced")
    source = select(fenced.c.id, *_MESSAGE_PARAMS.values())
    return (
        insert(messages)
        .from_select(["conversation_id", *_MESSAGE_PARAMS], source)
        .returning(messages.c.seq)
    )


FENCE_UPDATE = {kind: _fence_update(kind) for kind in StepKind}
ONE_STATEMENT_STEP = {kind: _one_statement(kind) for kind in StepKind}
INSERT_MESSAGE = insert(messages).values(conversation_id=bindparam("fence_id"), **_MESSAGE_PARAMS)

CLAIM = (
    update(conversations)
    .where(
        c.id == bindparam("claim_id"),
        # Plain parameters, not an expanding IN: the text is compiled once, values never change.
        c.status.in_([literal(status) for status in RUNNING_STATUSES]),
        (c.lease_owner.is_(None)) | (c.lease_expires_at < _NOW),
    )
    .values(
        lease_owner=bindparam("owner", type_=String),
        lease_epoch=c.lease_epoch + 1,
        lease_expires_at=_EXPIRES,
        heartbeat_at=_NOW,
        attempts=c.attempts + 1,
        updated_at=_NOW,
    )
    .returning(
        c.lease_epoch,
        c.status,
        c.model,
        c.instructions,
        c.allowed_tools,
        c.tool_choice,
        c.iterations,
        c.attempts,
    )
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
    )
    .where(messages.c.conversation_id == bindparam("transcript_id"))
    .order_by(messages.c.seq)
)


def step_parameters(
    fence_id: Any,
    fence_epoch: int,
    entry: Entry,
    *,
    now: datetime,
    ttl: float | None,
    usage: Usage | None,
) -> dict[str, Any]:
    usage = usage or Usage()
    return {
        "fence_id": fence_id,
        "fence_epoch": fence_epoch,
        "now": now,
        "expires": now + timedelta(seconds=ttl) if ttl is not None else None,
        "add_prompt_tokens": usage.prompt_tokens,
        "add_completion_tokens": usage.completion_tokens,
        "m_seq": entry.seq,
        "m_role": entry.role,
        "m_content": entry.content,
        "m_tool_calls": [call.as_json() for call in entry.tool_calls] or None,
        "m_tool_call_id": entry.tool_call_id,
        "m_tool_name": entry.tool_name,
        "m_is_error": entry.is_error,
        "m_finish_reason": entry.finish_reason,
    }


__all__ = [
    "CLAIM",
    "FENCE_UPDATE",
    "INSERT_MESSAGE",
    "ONE_STATEMENT_STEP",
    "TRANSCRIPT",
    "StepKind",
    "step_parameters",
]
