"""The web side's reads: a conversation with its messages after a cursor, a turn, a page of the
event log, the tool catalogue, and the database's readiness.

Each function runs its queries on the caller's `Connection` and returns views, never rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from sqlalchemy import Connection, bindparam, select, text, true, type_coerce
from sqlalchemy import cast as cast_
from sqlalchemy.dialects.postgresql import JSONB

from app.client.setup import SETUP_COLUMNS
from app.client.store import branches
from app.client.store.row_views import conversation_view, message_of_row, turn_of_row
from app.client.views import (
    ConversationView,
    MessageView,
    ToolInfo,
    TurnView,
)
from app.errors import ConversationNotFound, InvalidCursor, TurnNotFound
from app.models import APPROVED, MESSAGE_COMMITTED
from app.models import tables as table
from app.models.tables import catalog, conversations, events, messages, turns

_CONVERSATION_COLUMNS = (
    conversations.c.id,
    conversations.c.owner,
    conversations.c.status,
    conversations.c.error,
    *(conversations.c[name] for name in SETUP_COLUMNS),
    conversations.c.forked_from,
    conversations.c.forked_at_seq,
    conversations.c.iterations,
    conversations.c.prompt_tokens,
    conversations.c.completion_tokens,
    conversations.c.cost_usd,
    conversations.c.cached_tokens,
    conversations.c.turn_number,
    conversations.c.created_at,
    conversations.c.updated_at,
)


def check_owner(connection: Connection, conversation_id: uuid.UUID, owner: str | None) -> None:
    """`ConversationNotFound` unless the conversation exists and `owner` may see it (None: any
    caller's, a trusted one). Another owner's conversation is not found, never forbidden."""
    if owner is None:
        return
    found = connection.execute(
        select(conversations.c.owner).where(conversations.c.id == conversation_id)
    ).one_or_none()
    if found is None or found.owner != owner:
        raise ConversationNotFound(f"no conversation {conversation_id}")


def conversation_of_turn(
    connection: Connection, turn_id: uuid.UUID, owner: str | None
) -> uuid.UUID:
    """The turn's conversation; `TurnNotFound` when there is no such turn, or `owner` may not see
    it."""
    found = connection.execute(
        select(turns.c.conversation_id, conversations.c.owner)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.id == turn_id)
    ).one_or_none()
    if found is None or (owner is not None and found.owner != owner):
        raise TurnNotFound(f"no turn {turn_id}")
    return cast(uuid.UUID, found.conversation_id)


def turn_of_call(connection: Connection, call_id: str, owner: str | None) -> uuid.UUID:
    """The latest of `owner`'s turns that asked for an answer to call `call_id` (a client tool,
    a question, an approval); `TurnNotFound` when none did."""
    probe = cast_(type_coerce([{"call_id": call_id}], JSONB), JSONB)
    found = connection.execute(
        select(turns.c.id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.actions.op("@>")(probe))
        .where(true() if owner is None else conversations.c.owner == owner)
        .order_by(turns.c.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    if found is None:
        raise TurnNotFound(f"no turn waits for call {call_id!r}")
    return cast(uuid.UUID, found)


def turn_keyed(
    connection: Connection, conversation_ids: list[uuid.UUID], key: str, owner: str | None
) -> uuid.UUID | None:
    """The latest of `owner`'s turns submitted with idempotency key `key` in one of the
    conversations (by their unique key index); None when there is none."""
    if not conversation_ids:
        return None
    found = connection.execute(
        select(turns.c.id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.conversation_id.in_(conversation_ids), turns.c.idempotency_key == key)
        .where(true() if owner is None else conversations.c.owner == owner)
        .order_by(turns.c.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    return cast(uuid.UUID | None, found)


def list_conversations(
    connection: Connection, owner: str | None, limit: int, before: uuid.UUID | None
) -> list[ConversationView]:
    """The owner's conversations (everyone's when None), newest first, at most `limit`, those
    created before conversation `before` (the previous page's last); no messages."""
    query = select(*_CONVERSATION_COLUMNS)
    if owner is not None:
        query = query.where(conversations.c.owner == owner)
    if before is not None:
        mark = connection.execute(
            select(conversations.c.created_at, conversations.c.owner).where(
                conversations.c.id == before
            )
        ).one_or_none()
        if mark is None or (owner is not None and mark.owner != owner):
            raise InvalidCursor(f"page token {before} names no conversation of yours")
        query = query.where(
            (conversations.c.created_at < mark.created_at)
            | ((conversations.c.created_at == mark.created_at) & (conversations.c.id < before))
        )
    query = query.order_by(conversations.c.created_at.desc(), conversations.c.id.desc())
    return [conversation_view(row, []) for row in connection.execute(query.limit(limit))]


def turn_messages(connection: Connection, turn_id: uuid.UUID) -> list[MessageView]:
    """The messages the turn committed (its user message, calls, results and answer), in order."""
    rows = connection.execute(
        select(messages)
        .join(
            events,
            (events.c.conversation_id == messages.c.conversation_id)
            & (events.c.message_seq == messages.c.seq),
        )
        .where(events.c.turn_id == turn_id, events.c.type == MESSAGE_COMMITTED)
        .order_by(messages.c.seq)
    ).all()
    return [message_of_row(row) for row in rows]


def read_conversation(
    connection: Connection,
    conversation_id: uuid.UUID,
    after_seq: int | None,
    *,
    messages: bool = True,
    all_versions: bool = False,
) -> ConversationView:
    """The conversation and the messages of its active path with `seq > after_seq` (all when
    None; none without `messages`; every branch's with `all_versions`), each with its versions
    (`siblings`)."""
    row = connection.execute(
        select(*_CONVERSATION_COLUMNS).where(conversations.c.id == conversation_id)
    ).one_or_none()
    if row is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    if not messages:
        return conversation_view(row, [])
    query = select(table.messages).where(table.messages.c.conversation_id == conversation_id)
    if not all_versions:
        query = query.where(table.messages.c.active)
    if after_seq is not None:
        query = query.where(table.messages.c.seq > after_seq)
    found = [message_of_row(m) for m in connection.execute(query.order_by(table.messages.c.seq))]
    return conversation_view(row, with_versions(connection, conversation_id, found))


def with_versions(
    connection: Connection, conversation_id: uuid.UUID, found: list[MessageView]
) -> list[MessageView]:
    """The messages, each with its versions (its siblings and itself)."""
    groups = branches.versions(connection, conversation_id, (m.parent_seq for m in found))
    return [replace(m, siblings=groups.get(m.parent_seq, [m.seq])) for m in found]


def read_turn(connection: Connection, turn_id: uuid.UUID) -> TurnView:
    """The turn; `TurnNotFound` when there is none."""
    row = connection.execute(select(turns).where(turns.c.id == turn_id)).one_or_none()
    if row is None:
        raise TurnNotFound(f"no turn {turn_id}")
    return _with_answers(connection, turn_of_row(row._mapping))


def read_owned_turn(connection: Connection, turn_id: uuid.UUID, owner: str | None) -> TurnView:
    """The turn if `owner` may see it (None: anyone's); `TurnNotFound` otherwise. One statement
    (`TURN_AND_OWNER`), a second only for a turn that asked for actions (which are answered);
    `loop_store` awaits the same."""
    rows = connection.execute(TURN_AND_OWNER, {"turn_id": turn_id}).all()
    return _with_answers(connection, owned_turn(rows, turn_id, owner))


def current_turn(connection: Connection, conversation_id: uuid.UUID) -> TurnView | None:
    """The conversation's current (or last) turn; None before its first."""
    row = connection.execute(
        select(turns)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.conversation_id == conversation_id)
        .where(turns.c.number == conversations.c.turn_number)
    ).one_or_none()
    return None if row is None else _with_answers(connection, turn_of_row(row._mapping))


def _with_answers(connection: Connection, turn: TurnView) -> TurnView:
    """The turn with each action's `answered` (whether its call has a result)."""
    if not turn.actions:
        return turn
    answered = connection.execute(
        ANSWERED, {"conversation_id": turn.conversation_id, "call_ids": call_ids(turn)}
    ).scalars()
    return with_answered(turn, set(answered))


# The turn with its conversation's owner (`owned_turn` reads it).
TURN_AND_OWNER = (
    select(turns, conversations.c.owner.label("conversation_owner"))
    .join(conversations, conversations.c.id == turns.c.conversation_id)
    .where(turns.c.id == bindparam("turn_id"))
)
_TURN_KEYS = tuple(str(column.key) for column in TURN_AND_OWNER.selected_columns)
# Which of a turn's action calls have a result (`call_ids`: the actions' ids).
ANSWERED = select(messages.c.tool_call_id).where(
    messages.c.conversation_id == bindparam("conversation_id"),
    messages.c.role == "tool",
    messages.c.tool_call_id.in_(bindparam("call_ids", expanding=True)),
)


def owned_turn(rows: Sequence[Sequence[Any]], turn_id: uuid.UUID, owner: str | None) -> TurnView:
    """The turn `TURN_AND_OWNER`'s rows hold, without its answers (see `read_owned_turn`)."""
    row = dict(zip(_TURN_KEYS, rows[0], strict=True)) if rows else None
    if row is None or (owner is not None and row["conversation_owner"] != owner):
        raise TurnNotFound(f"no turn {turn_id}")
    return turn_of_row(row)


_TURNS_KEYS = tuple(str(column.key) for column in turns.c)


def turn_view(row: Sequence[Any]) -> TurnView:
    """The view of a row of every column of `turns`, in the table's order."""
    return turn_of_row(dict(zip(_TURNS_KEYS, row, strict=True)))


def call_ids(turn: TurnView) -> list[str]:
    return [action.call_id for action in turn.actions]


def with_answered(turn: TurnView, answered: set[str]) -> TurnView:
    """The turn with each action's `answered`: its call has a result (`answered` holds the call
    ids that have), or it was approved."""
    actions = tuple(
        replace(a, answered=a.call_id in answered or a.decision == APPROVED) for a in turn.actions
    )
    return replace(turn, actions=actions)


def read_catalogue(connection: Connection) -> list[ToolInfo]:
    """Every published tool, by name."""
    rows = connection.execute(select(catalog).order_by(catalog.c.name)).all()
    return [ToolInfo(r.name, r.server, r.description, r.input_schema) for r in rows]


def catalogue_names(connection: Connection) -> set[str]:
    """The names of the published tools."""
    return set(connection.execute(select(catalog.c.name)).scalars())


def ping(connection: Connection) -> None:
    """The cheapest round trip: raises when the database does not answer."""
    connection.execute(text("SELECT 1"))
