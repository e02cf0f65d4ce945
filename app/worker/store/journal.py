"""What each fenced conversation UPDATE also writes: the step's message, the turn's row, and the
events that describe them. Each such part reads the UPDATE's returned row (the source), so it
writes nothing unless the fence matched.

On PostgreSQL an UPDATE and its parts are one statement (`WITH fenced AS (UPDATE ... RETURNING
...), part_0 AS (INSERT ...), ... SELECT * FROM fenced`): one round trip, one transaction. Other
databases run the UPDATE, then each part over the returned row bound as `f_<column>` parameters,
in one transaction. Either way the parts are built once, from the same functions.

The events a statement appends are one more part, built by `event_log.log` from the seqs its
UPDATE reserved, in the order `composites` lists them (each statement: its head and parts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BindParameter,
    Boolean,
    FromClause,
    Insert,
    Integer,
    Select,
    String,
    Text,
    Update,
    Uuid,
    bindparam,
    case,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.models import (
    COMPLETED,
    MESSAGE_COMMITTED,
    RUNNING,
    USER,
)
from app.models.tables import compactions, messages, tool_outputs, turns
from app.worker.plan import Entry
from app.worker.ports import Usage
from app.worker.store.event_log import Logged
from app.worker.store.fence import (
    ADD_CACHED,
    ADD_COMPLETION,
    ADD_COST,
    ADD_PROMPT,
    NOW,
    TURN_ID,
)

Part = Callable[[FromClause], Insert | Update]


@dataclass(frozen=True)
class Composite:
    """A fenced UPDATE (the head, returning its row) and the statements that depend on it."""

    head: Update
    parts: tuple[Part, ...] = ()

    def one_statement(self) -> Select[Any] | Update:
        """PostgreSQL: the head and every part in one statement, returning the head's row."""
        if not self.parts:
            return self.head
        fenced = self.head.cte("fenced")
        written = [part(fenced).cte(f"part_{n}") for n, part in enumerate(self.parts)]
        return select(*fenced.c).add_cte(*written)

    def bound_parts(self) -> tuple[Insert | Update, ...]:
        """Elsewhere: each part over the head's row, bound as `f_<column>` parameters."""
        row = select(
            *(
                bindparam(f"f_{column.key}", type_=column.type).label(column.key)
                for column in self.head.exported_columns
            )
        ).cte("fenced")
        return tuple(part(row) for part in self.parts)


# --- the parts --------------------------------------------------------------------------------

_JSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
# The message's columns and their parameters; None is SQL NULL, not JSON null.
_MESSAGE_PARAMS: dict[str, BindParameter[Any]] = {
    "seq": bindparam("m_seq", type_=Integer),
    "parent_seq": bindparam("m_parent_seq", type_=Integer),
    "role": bindparam("m_role", type_=String),
    "content": bindparam("m_content", type_=Text),
    "tool_calls": bindparam("m_tool_calls", type_=_JSON),
    "tool_call_id": bindparam("m_tool_call_id", type_=String),
    "tool_name": bindparam("m_tool_name", type_=String),
    "is_error": bindparam("m_is_error", type_=Boolean),
    "finish_reason": bindparam("m_finish_reason", type_=String),
    "reply_stream": bindparam("m_reply_stream", type_=_JSON),
    "usage": bindparam("m_usage", type_=_JSON),
    "output": bindparam("m_output", type_=_JSON),
    "output_error": bindparam("m_output_error", type_=Text),
    "files": bindparam("m_files", type_=_JSON),
}
ACTIONS = bindparam("actions", type_=_JSON)
# The whole output of an MCP call, kept beside its (compact) tool message.
_OUTPUT_PARAMS: dict[str, BindParameter[Any]] = {
    "arguments": bindparam("o_arguments", type_=_JSON),
    "content": bindparam("o_content", type_=Text),
    "chars": bindparam("o_chars", type_=Integer),
}
# A compaction's row (`compactions`): its columns and their parameters.
COMPACTION_PARAMS: dict[str, BindParameter[Any]] = {
    "number": bindparam("k_number", type_=Integer),
    "kind": bindparam("k_kind", type_=String),
    "reason": bindparam("k_reason", type_=String),
    "from_seq": bindparam("k_from_seq", type_=Integer),
    "through_seq": bindparam("k_through_seq", type_=Integer),
    "elided_through": bindparam("k_elided_through", type_=Integer),
    "summarized_through": bindparam("k_summarized_through", type_=Integer),
    "summary": bindparam("k_summary", type_=Text),
    "tokens_before": bindparam("k_tokens_before", type_=Integer),
    "tokens_after": bindparam("k_tokens_after", type_=Integer),
    "window": bindparam("k_window", type_=Integer),
    "model": bindparam("k_model", type_=String),
    "prompt_tokens": ADD_PROMPT,
    "completion_tokens": ADD_COMPLETION,
    "cost_usd": ADD_COST,
}
COMPACTED_DATA = bindparam("k_data", type_=_JSON)
JSON_PARAMETERS = (
    "m_tool_calls",
    "m_reply_stream",
    "m_usage",
    "actions",
    "o_arguments",
    "k_data",
    "steered_data",
    "m_output",
    "fallback_data",
    "m_files",
)


def insert_message(fenced: FromClause) -> Insert:
    source = select(fenced.c.id, *_MESSAGE_PARAMS.values())
    return insert(messages).from_select(["conversation_id", *_MESSAGE_PARAMS], source)


def keep_output(fenced: FromClause) -> Insert:
    """The session tool cache's copy of the call's whole output (`tool_outputs`)."""
    message = _MESSAGE_PARAMS
    source = select(
        fenced.c.id,
        message["tool_call_id"],
        TURN_ID,
        message["seq"],
        message["tool_name"],
        _OUTPUT_PARAMS["arguments"],
        _OUTPUT_PARAMS["content"],
        _OUTPUT_PARAMS["chars"],
        message["is_error"],
        NOW,
    )
    columns = ["conversation_id", "call_id", "turn_id", "seq", "tool", *_OUTPUT_PARAMS]
    return insert(tool_outputs).from_select([*columns, "is_error", "created_at"], source)


def insert_compaction(fenced: FromClause) -> Insert:
    """The compaction's row: what the model is sent from now on."""
    source = select(fenced.c.id, TURN_ID, NOW, *COMPACTION_PARAMS.values())
    columns = ["conversation_id", "turn_id", "created_at", *COMPACTION_PARAMS]
    return insert(compactions).from_select(columns, source)


def promote_message(fenced: FromClause) -> Insert:
    """A turn that waited outside the transcript: its message goes in as the claim starts it,
    below the leaf (or where its turn says: an edit, a rollback)."""
    source = select(
        fenced.c.id,
        fenced.c.message_seq,
        # (a turn's parent 0: a new first message, a root)
        case(
            (fenced.c.turn_parent == 0, None),
            else_=func.coalesce(fenced.c.turn_parent, fenced.c.leaf),
        ),
        literal(USER, String),
        fenced.c.turn_input,
        fenced.c.turn_files,
        literal(False, Boolean),  # a prebuilt statement gets no Python-side column defaults
        literal(True, Boolean),
    ).where(fenced.c.turn_input.is_not(None))
    columns = [
        "conversation_id",
        "seq",
        "parent_seq",
        "role",
        "content",
        "files",
        "is_error",
        "active",
    ]
    return insert(messages).from_select(columns, source)


def start_turn(fenced: FromClause) -> Update:
    promoted = select(
        case((fenced.c.turn_input.is_not(None), fenced.c.message_seq))
    ).scalar_subquery()
    return (
        update(turns)
        .where(turns.c.id == select(fenced.c.turn_id).scalar_subquery())
        .values(
            status=RUNNING,
            started_at=func.coalesce(turns.c.started_at, NOW),
            input=None,
            files=None,
            message_seq=func.coalesce(turns.c.message_seq, promoted),
            # where its messages hang: a rollback of it cuts the path there
            parent_seq=func.coalesce(
                turns.c.parent_seq, select(fenced.c.leaf).scalar_subquery(), 0
            ),
        )
    )


TURN_USAGE = {
    "prompt_tokens": turns.c.prompt_tokens + ADD_PROMPT,
    "completion_tokens": turns.c.completion_tokens + ADD_COMPLETION,
    "cost_usd": turns.c.cost_usd + ADD_COST,
    "cached_tokens": turns.c.cached_tokens + ADD_CACHED,
}


def running_turn(**values: Any) -> Part:
    """An UPDATE of the lease holder's turn, only if the fence matched."""

    def part(fenced: FromClause) -> Update:
        fence_matched = select(fenced.c.id).exists()
        return update(turns).where(turns.c.id == TURN_ID, fence_matched).values(**values)

    return part


add_usage = running_turn(**TURN_USAGE)


def end_turn(status: str, **values: Any) -> Part:
    return running_turn(status=status, finished_at=NOW, **TURN_USAGE, **values)


# A steered turn: the one the lease holder ran until its steer message was taken in.
ENDED_ID = bindparam("ended_id", type_=Uuid)
STEERED_DATA = bindparam("steered_data", type_=_JSON)


def end_steered(fenced: FromClause) -> Update:
    """The turn the steer message joined ends `completed`: the steer turn carries the run on."""
    fence_matched = select(fenced.c.id).exists()
    return (
        update(turns)
        .where(turns.c.id == ENDED_ID, fence_matched)
        .values(status=COMPLETED, finished_at=NOW)
    )


start_steer = running_turn(
    status=RUNNING,
    started_at=NOW,
    input=None,
    files=None,
    message_seq=_MESSAGE_PARAMS["seq"],
    parent_seq=_MESSAGE_PARAMS["parent_seq"],
)


# A fallback: the model the turn moves to, and what the event says (from, to, the error).
FALLBACK_MODEL = bindparam("fallback_model", type_=String)
FALLBACK_DATA = bindparam("fallback_data", type_=_JSON)


def committed(fenced: FromClause) -> Logged:
    return Logged(MESSAGE_COMMITTED, message_seq=_MESSAGE_PARAMS["seq"])


# --- parameters -------------------------------------------------------------------------------


def usage_parameters(usage: Usage | None) -> dict[str, Any]:
    usage = usage or Usage()
    cost = usage.cost_usd
    return {
        "add_prompt_tokens": usage.prompt_tokens,
        "add_completion_tokens": usage.completion_tokens,
        "add_cost_usd": None if cost is None else Decimal(repr(cost)),
        "add_cached_tokens": usage.cached_tokens,
    }


def output_parameters(arguments: dict[str, Any], content: str) -> dict[str, Any]:
    return {"o_arguments": arguments, "o_content": content, "o_chars": len(content)}


def message_parameters(
    entry: Entry,
    parent: int | None,
    reply_stream: dict[str, Any] | None = None,
    usage: Usage | None = None,
    *,
    model: str | None = None,
    output: Any = None,
) -> dict[str, Any]:
    """A message's INSERT parameters; `model`: the one whose call wrote it (in its usage),
    `output`: a structured answer's parsed object (JSON null is never stored: SQL NULL)."""
    return {
        "m_parent_seq": parent,
        "m_reply_stream": reply_stream,
        "m_usage": None if usage is None else usage.as_json(model),
        "m_output": output,
        "m_output_error": entry.refusal,
        "m_files": list(entry.files) or None,
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
    "ACTIONS",
    "COMPACTED_DATA",
    "COMPACTION_PARAMS",
    "ENDED_ID",
    "FALLBACK_DATA",
    "FALLBACK_MODEL",
    "JSON_PARAMETERS",
    "STEERED_DATA",
    "TURN_ID",
    "TURN_USAGE",
    "Composite",
    "Logged",
    "add_usage",
    "committed",
    "end_steered",
    "end_turn",
    "insert_compaction",
    "insert_message",
    "keep_output",
    "message_parameters",
    "output_parameters",
    "promote_message",
    "running_turn",
    "start_steer",
    "start_turn",
    "usage_parameters",
]
