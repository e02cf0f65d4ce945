"""The statements of a turn's lease, built once at import: the claim that grants an epoch, and
every write a running worker makes, fenced by that epoch.

Each rule is written once and shared by every statement that needs it:

    FENCE           WHERE id = :fence_id AND lease_epoch = :fence_epoch; zero rows means another
                    worker claimed the conversation since: the write did not happen
    PROGRESS        a committed step renews the lease and resets the attempt count
    RELEASED_LEASE  no worker holds the conversation (app.models; the web app writes it too)

A step is the fenced conversation UPDATE plus the message INSERT. On PostgreSQL they are one
statement (`STEP[kind]`: `WITH fenced AS (UPDATE ... RETURNING id) INSERT ... SELECT ... FROM
fenced`), one round trip and one transaction, inserting nothing unless the fence matched; other
databases run `STEP_FENCE[kind]` and `INSERT_MESSAGE` in one transaction.
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

from app.models import (
    FAILED,
    IDLE,
    RELEASED_LEASE,
    RUNNING_STATUSES,
    TOOL_LOOP,
    Conversation,
    Message,
)
from app.worker.plan import Entry
from app.worker.ports import Usage

conversations = typed(Table, Conversation.__table__)
messages = typed(Table, Message.__table__)
c = conversations.c

_NOW = bindparam("now", type_=DateTime(timezone=True))
_EXPIRES = bindparam("expires", type_=DateTime(timezone=True))

FENCE = and_(c.id == bindparam("fence_id"), c.lease_epoch == bindparam("fence_epoch"))
PROGRESS = {"lease_expires_at": _EXPIRES, "attempts": 0}
_TOUCHED = {"heartbeat_at": _NOW, "updated_at": _NOW}  # every write is a sign of life
_COUNTED = {
    "prompt_tokens": c.prompt_tokens + bindparam("add_prompt_tokens", type_=Integer),
    "completion_tokens": c.completion_tokens + bindparam("add_completion_tokens", type_=Integer),
}


def _fenced(**values: Any) -> Update:
    return update(conversations).where(FENCE).values(**_TOUCHED, **values)


# --- the claim --------------------------------------------------------------------------------

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
        attempts=c.attempts + 1,
        **_TOUCHED,
    )
    .returning(
        c.lease_epoch,
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


# --- fenced updates on their own --------------------------------------------------------------


class Write(enum.Enum):
    HEARTBEAT = "heartbeat"  # the lease renewed while the model or a tool is slow
    RELEASE = "release"  # the lease given up (shutdown): another worker may claim at once
    FINISH = "finish"  # the final text is already committed: idle
    FAIL = "fail"  # failed with a readable error; a failed model call's tokens still count


WRITE = {
    Write.HEARTBEAT: _fenced(lease_expires_at=_EXPIRES),
    Write.RELEASE: _fenced(**RELEASED_LEASE),
    Write.FINISH: _fenced(status=IDLE, **RELEASED_LEASE),
    Write.FAIL: _fenced(
        status=FAILED, error=bindparam("error", type_=Text), **RELEASED_LEASE, **_COUNTED
    ),
}


# --- steps: the conversation update and the message insert, atomically ----------------------


class StepKind(enum.Enum):
    TOOL_CALLS = "tool_calls"  # the assistant asks for tools: tool_loop, one LLM call counted
    TOOL_RESULT = "tool_result"  # one tool's result: tool_loop
    ANSWER = "answer"  # the final text: idle, lease released, one LLM call counted


_ITERATION = {"iterations": c.iterations + 1, **_COUNTED}
_STEP_SET: dict[StepKind, dict[str, Any]] = {
    StepKind.TOOL_CALLS: {"status": TOOL_LOOP, **PROGRESS, **_ITERATION},
    StepKind.TOOL_RESULT: {"status": TOOL_LOOP, **PROGRESS},
    StepKind.ANSWER: {"status": IDLE, **RELEASED_LEASE, **_ITERATION},
}

# The message's columns and their parameters; None is SQL NULL, not JSON null.
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
JSON_PARAMETERS = ("m_tool_calls",)


def _one_statement(kind: StepKind) -> Insert:
    fenced = STEP_FENCE[kind].returning(c.id).cte("fenced")
    source = select(fenced.c.id, *_MESSAGE_PARAMS.values())
    return (
        insert(messages)
        .from_select(["conversation_id", *_MESSAGE_PARAMS], source)
        .returning(messages.c.seq)
    )


STEP_FENCE = {kind: _fenced(**_STEP_SET[kind]) for kind in StepKind}
INSERT_MESSAGE = insert(messages).values(conversation_id=bindparam("fence_id"), **_MESSAGE_PARAMS)
STEP = {kind: _one_statement(kind) for kind in StepKind}


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


def usage_parameters(usage: Usage | None) -> dict[str, int]:
    usage = usage or Usage()
    return {
        "add_prompt_tokens": usage.prompt_tokens,
        "add_completion_tokens": usage.completion_tokens,
    }


def message_parameters(entry: Entry) -> dict[str, Any]:
    return {
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
    "FENCE",
    "INSERT_MESSAGE",
    "JSON_PARAMETERS",
    "PROGRESS",
    "STEP",
    "STEP_FENCE",
    "TRANSCRIPT",
    "WRITE",
    "StepKind",
    "Write",
    "fence_parameters",
    "message_parameters",
    "usage_parameters",
]
