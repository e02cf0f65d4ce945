"""The common submit in two statements, without a lock or a transaction of its own: one read of
everything admission needs (`READ`), then one fenced statement (`START`) that writes the turn, its
message and its three events and moves the conversation's counters, only if the conversation is
still as it was read. PostgreSQL only (`loop_store` awaits both on the API's event loop).

The common submit: a message to a resting conversation, no files, no branch point, no budget
and no owner limit to weigh, no turn waiting for the user; or a repeat of an idempotency key
(nothing written). `intake.submit`, the general path, serves everything else (it locks the row,
reads again and decides again: the same decision on the same rows), and this one too whenever
the fence finds the conversation changed since the read (another writer came first): nothing is
written twice, as the fence matches at most once for what was read.

The fence is the conversation's `event_seq`, `turn_count` and `status` as read: every web-side
write and every worker step moves `event_seq` (each appends an event), so a matching fence means
no write came between the read and this statement (`journal`'s locking order, by another route).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    Text,
    Uuid,
    bindparam,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
)

from app.client.admission import Keyed
from app.client.store.new_turns import ROOT, NewTurn
from app.errors import ConversationNotFound
from app.models import (
    FOR_MESSAGE,
    MESSAGE_COMMITTED,
    PROCESSING,
    RELEASED_LEASE,
    REQUIRES_ACTION,
    STATUS_CHANGED,
    TURN_QUEUED,
    USER,
)
from app.models.base import JsonType
from app.models.tables import budgets, conversations, events, messages, turns

_current = turns.alias("current_turn")
_keyed = turns.alias("keyed_turn")
_keyed_message = messages.alias("keyed_message")
_all = messages.alias("any_message")
_active = messages.alias("active_message")

# Everything a submit is admitted on, in one row (none: no such conversation).
READ = (
    select(
        conversations.c.owner,
        conversations.c.status,
        conversations.c.turn_count,
        conversations.c.event_seq,
        select(_current.c.status)
        .where(
            _current.c.conversation_id == conversations.c.id,
            _current.c.number == conversations.c.turn_number,
        )
        .scalar_subquery()
        .label("current_status"),
        select(func.max(_all.c.seq))
        .where(_all.c.conversation_id == conversations.c.id)
        .scalar_subquery()
        .label("last_message"),
        select(func.max(_active.c.seq))
        .where(_active.c.conversation_id == conversations.c.id, _active.c.active)
        .scalar_subquery()
        .label("leaf"),
        exists()
        .where(
            or_(
                budgets.c.conversation_id == conversations.c.id,
                budgets.c.owner == conversations.c.owner,
            )
        )
        .label("budgeted"),
        _keyed.c.id.label("keyed_id"),
        _keyed.c.number.label("keyed_number"),
        _keyed.c.status.label("keyed_status"),
        _keyed.c.message_seq.label("keyed_message_seq"),
        _keyed.c.input.label("keyed_input"),
        _keyed_message.c.content.label("keyed_content"),
    )
    .select_from(
        conversations.outerjoin(
            _keyed,
            (_keyed.c.conversation_id == conversations.c.id)
            & (_keyed.c.idempotency_key == bindparam("key", type_=String)),
        ).outerjoin(
            _keyed_message,
            (_keyed_message.c.conversation_id == _keyed.c.conversation_id)
            & (_keyed_message.c.seq == _keyed.c.message_seq),
        )
    )
    .where(conversations.c.id == bindparam("conversation_id", type_=Uuid))
)


@dataclass(frozen=True)
class Seen:
    """The conversation as `READ` found it."""

    status: str
    turn_count: int
    event_seq: int
    last_message: int
    leaf: int | None
    keyed: Keyed | None
    quick: bool  # nothing the general path must weigh: no budget, no turn waiting for the user


def seen(rows: Sequence[Sequence[Any]], conversation_id: uuid.UUID, owner: str | None) -> Seen:
    """What `READ`'s rows say; `ConversationNotFound` as `reads.check_owner` says it."""
    if not rows or (owner is not None and rows[0][0] != owner):
        raise ConversationNotFound(f"no conversation {conversation_id}")
    (
        _,
        status,
        turn_count,
        event_seq,
        current,
        last_message,
        leaf,
        budgeted,
        keyed_id,
        number,
        keyed_status,
        message_seq,
        waiting_text,
        content,
    ) = rows[0]
    keyed = None
    if keyed_id is not None:  # (as `new_turns.keyed_turn`)
        text = waiting_text if waiting_text is not None else content
        keyed = Keyed(keyed_id, number, keyed_status, message_seq, text, waiting_text is not None)
    quick = not budgeted and current != REQUIRES_ACTION
    return Seen(status, turn_count, event_seq, last_message or 0, leaf, keyed, quick)


# (sent wrapped as JSON by `RawStatement`, None as SQL NULL; the type only casts the placeholder)
JSON_PARAMETERS = ("metadata", "output_schema", "echo", "trace_context")


def _start() -> Any:
    """`new_turns.start_turn` of a message below the leaf, fenced on what was read."""
    fenced = (
        update(conversations)
        .where(
            conversations.c.id == bindparam("conversation_id", type_=Uuid),
            conversations.c.event_seq == bindparam("seen_event_seq", type_=Integer),
            conversations.c.turn_count == bindparam("seen_turn_count", type_=Integer),
            conversations.c.status == bindparam("seen_status", type_=String),
        )
        .values(
            # (as `conversations._started` and `journal.append`)
            event_seq=bindparam("last_seq", type_=Integer),
            status=PROCESSING,
            error=None,
            iterations=0,
            attempts=0,
            turn_number=bindparam("number", type_=Integer),
            turn_count=bindparam("number", type_=Integer),
            **RELEASED_LEASE,
            heartbeat_at=bindparam("now"),
            updated_at=bindparam("now"),
        )
        .returning(conversations.c.id)
        .cte("fenced")
    )
    turn_id = bindparam("turn_id", type_=Uuid)
    message_seq = bindparam("message_seq", type_=Integer)
    new_turn = (
        insert(turns)
        .from_select(
            [
                "id",
                "conversation_id",
                "number",
                "kind",
                "message_seq",
                "parent_seq",
                "idempotency_key",
                "caller_metadata",
                "output_schema",
                "echo",
                "trace_context",
            ],
            select(
                turn_id,
                fenced.c.id,
                bindparam("number", type_=Integer),
                literal(FOR_MESSAGE),
                message_seq,
                bindparam("turn_parent_seq", type_=Integer),
                bindparam("key", type_=String),
                bindparam("metadata", type_=JsonType),
                bindparam("output_schema", type_=JsonType),
                bindparam("echo", type_=JsonType),
                bindparam("trace_context", type_=JsonType),
            ),
            include_defaults=False,  # (the server's: a Python-side default is compiled once)
        )
        .returning(*turns.c)
        .cte("new_turn")
    )
    new_message = insert(messages).from_select(
        ["conversation_id", "seq", "parent_seq", "role", "content"],
        select(
            fenced.c.id,
            message_seq,
            bindparam("parent_seq", type_=Integer),
            literal(USER),
            bindparam("text", type_=Text),
        ),
        include_defaults=False,
    )
    logged = [  # turn.queued, message.committed, status.changed: the seqs after the one read
        select(
            fenced.c.id,
            bindparam(f"seq_{n}", type_=Integer),
            literal(kind),
            turn_id,
            message_seq if kind == MESSAGE_COMMITTED else literal(None, Integer),
            literal(PROCESSING if kind == STATUS_CHANGED else None, String),
        )
        for n, kind in enumerate((TURN_QUEUED, MESSAGE_COMMITTED, STATUS_CHANGED), start=1)
    ]
    new_events = insert(events).from_select(
        ["conversation_id", "seq", "type", "turn_id", "message_seq", "status"],
        union_all(*logged),
        include_defaults=False,
    )
    return select(*new_turn.c).add_cte(new_message.cte("new_message"), new_events.cte("new_events"))


START = _start()


def start_parameters(
    conversation_id: uuid.UUID,
    read: Seen,
    text: str,
    key: str | None,
    *,
    metadata: dict[str, str] | None,
    output_schema: dict[str, Any] | None,
    echo: dict[str, Any] | None,
    trace_context: dict[str, str] | None,
    now: datetime,
) -> tuple[NewTurn, dict[str, Any]]:
    """The turn `START` writes, and its parameters."""
    number = read.turn_count + 1
    turn = NewTurn(uuid.uuid4(), number, "queued", read.last_message + 1, waits=False)
    return turn, {
        "conversation_id": conversation_id,
        "seen_event_seq": read.event_seq,
        "seen_turn_count": read.turn_count,
        "seen_status": read.status,
        "last_seq": read.event_seq + 3,
        "number": number,
        "now": now,
        "turn_id": turn.id,
        "message_seq": turn.message_seq,
        "turn_parent_seq": read.leaf or ROOT,
        "parent_seq": read.leaf,
        "key": key,
        "metadata": metadata or None,
        "output_schema": output_schema,
        "echo": echo,
        "trace_context": trace_context,
        "text": text,
        **{f"seq_{n}": read.event_seq + n for n in (1, 2, 3)},
    }


__all__ = ["JSON_PARAMETERS", "READ", "START", "Seen", "seen", "start_parameters"]
