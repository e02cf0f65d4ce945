"""The web side's reads: a conversation with its messages after a cursor, a turn, a page of the
event log, the tool catalogue, and the database's readiness.

Each function runs its queries on the caller's `Connection` and returns views, never rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import Connection, Select, bindparam, func, select, text

from app.client.store import branches
from app.client.views import (
    ActionView,
    ConversationView,
    EventPage,
    EventView,
    MessageView,
    ToolInfo,
    TurnView,
)
from app.errors import ConversationNotFound, InvalidCursor, TurnNotFound
from app.files.media import shown
from app.models import APPROVED, MESSAGE_COMMITTED
from app.models import tables as table
from app.models.tables import catalog, conversations, events, messages, turns

_CONVERSATION_COLUMNS = (
    conversations.c.id,
    conversations.c.owner,
    conversations.c.status,
    conversations.c.error,
    conversations.c.model,
    conversations.c.instructions,
    conversations.c.allowed_tools,
    conversations.c.tool_choice,
    conversations.c.context,
    conversations.c.client_tools,
    conversations.c.approval_tools,
    conversations.c.clarify,
    conversations.c.context_policy,
    conversations.c.output_schema,
    conversations.c.fallback_models,
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
    return [_conversation_view(row, []) for row in connection.execute(query.limit(limit))]


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
    return [_message_view(row) for row in rows]


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
        return _conversation_view(row, [])
    query = select(table.messages).where(table.messages.c.conversation_id == conversation_id)
    if not all_versions:
        query = query.where(table.messages.c.active)
    if after_seq is not None:
        query = query.where(table.messages.c.seq > after_seq)
    found = [_message_view(m) for m in connection.execute(query.order_by(table.messages.c.seq))]
    return _conversation_view(row, with_versions(connection, conversation_id, found))


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
    return _with_answers(connection, _turn_view(row._mapping))


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
    return None if row is None else _with_answers(connection, _turn_view(row._mapping))


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
    return _turn_view(row)


_TURNS_KEYS = tuple(str(column.key) for column in turns.c)


def turn_view(row: Sequence[Any]) -> TurnView:
    """The view of a row of every column of `turns`, in the table's order."""
    return _turn_view(dict(zip(_TURNS_KEYS, row, strict=True)))


def call_ids(turn: TurnView) -> list[str]:
    return [action.call_id for action in turn.actions]


def with_answered(turn: TurnView, answered: set[str]) -> TurnView:
    """The turn with each action's `answered`: its call has a result (`answered` holds the call
    ids that have), or it was approved."""
    actions = tuple(
        replace(a, answered=a.call_id in answered or a.decision == APPROVED) for a in turn.actions
    )
    return replace(turn, actions=actions)


# Prefixed (events, turns and messages share column names); a turn's but a waiting message's
_TURN_COLUMNS = [  # text and files, and the trace: no view shows them
    column.label(f"trn_{column.key}")
    for column in turns.c
    if column.key not in ("input", "files", "trace_context")
]
_MESSAGE_COLUMNS = [column.label(f"msg_{column.key}") for column in messages.c]


def read_events(
    connection: Connection,
    conversation_id: uuid.UUID,
    after: int,
    limit: int,
    owner: str | None = None,
) -> EventPage:
    """Up to `limit` committed events with `seq > after`, with the rows they name.

    `InvalidCursor` for a cursor beyond the last event; `ConversationNotFound` (also when
    `owner` may not see it, as `check_owner`). The hottest read of the API (every stream, every
    long poll): one statement built once (`EVENTS_PAGE`; `loop_store` awaits the same one)."""
    rows = connection.execute(EVENTS_PAGE, page_parameters(conversation_id, after, limit)).all()
    return events_page(rows, conversation_id, after, owner)


def page_parameters(conversation_id: uuid.UUID, after: int, limit: int) -> dict[str, Any]:
    """`EVENTS_PAGE`'s parameters. A cursor past the largest seq a column holds reads as that
    seq (no event is after it; `events_page` finds the cursor beyond the last event)."""
    return {"conversation_id": conversation_id, "after": min(after, _MAX_SEQ), "limit": limit}


def events_page(
    rows: Sequence[Sequence[Any]], conversation_id: uuid.UUID, after: int, owner: str | None
) -> EventPage:
    """The page `EVENTS_PAGE`'s rows make (see `read_events`)."""
    head = rows[0] if rows else None
    if head is None or (owner is not None and head[_HEAD_OWNER] != owner):
        raise ConversationNotFound(f"no conversation {conversation_id}")
    last_seq = head[_HEAD_EVENT_SEQ]
    if after > last_seq:
        raise InvalidCursor(
            f"cursor {after} is beyond the last event of conversation {conversation_id} "
            f"({last_seq})"
        )
    seq = _PAGE.seq
    found = [_PAGE.view(row) for row in rows if row[seq] is not None]
    return EventPage(conversation_id, found, last_seq, head[_HEAD_STATUS], head[_HEAD_LAST_MESSAGE])


def turn_events(connection: Connection, turn_id: uuid.UUID) -> list[EventView]:
    """Every committed event of the turn, in order, with the rows they name."""
    query = _events_with_rows().where(events.c.turn_id == turn_id).order_by(events.c.seq)
    return [_EVENT_ROW.view(row) for row in connection.execute(query)]


def _events_with_rows() -> Select[Any]:
    """Events joined with the turn and the message each names (`_EventRow` reads them)."""
    return select(events, *_TURN_COLUMNS, *_MESSAGE_COLUMNS).select_from(_EVENTS_JOINED)


_EVENTS_JOINED = events.outerjoin(turns, turns.c.id == events.c.turn_id).outerjoin(
    messages,
    (messages.c.conversation_id == events.c.conversation_id)
    & (messages.c.seq == events.c.message_seq),
)
_LAST = messages.alias("last_message")
_MAX_SEQ = 2**31 - 1  # (an INTEGER column's largest)
# A page of the log in one statement (one snapshot): the conversation's head on every row (its
# last event, status, owner and last message), then each event after the cursor with the turn and
# the message it names; a conversation without such events is one row, its event's columns null.
EVENTS_PAGE = (
    select(
        conversations.c.event_seq.label("head_event_seq"),
        conversations.c.status.label("head_status"),
        conversations.c.owner.label("head_owner"),
        select(func.coalesce(func.max(_LAST.c.seq), 0))
        .where(_LAST.c.conversation_id == conversations.c.id)
        .correlate(conversations)
        .scalar_subquery()
        .label("head_last_message"),
        events,
        *_TURN_COLUMNS,
        *_MESSAGE_COLUMNS,
    )
    .select_from(
        conversations.outerjoin(
            _EVENTS_JOINED,
            (events.c.conversation_id == conversations.c.id) & (events.c.seq > bindparam("after")),
        )
    )
    .where(conversations.c.id == bindparam("conversation_id"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)


class _EventRow:
    """Where an event's columns, its turn's (`trn_`) and its message's (`msg_`) are in a row of
    `statement`, found once: a view is built from positions, not from a mapping per row."""

    def __init__(self, statement: Select[Any]) -> None:
        keys = [str(column.key) for column in statement.selected_columns]

        def part(prefix: str) -> tuple[slice, tuple[str, ...]]:
            at = [n for n, key in enumerate(keys) if key.startswith(prefix)]
            assert at == list(range(at[0], at[-1] + 1))  # (contiguous)
            return slice(at[0], at[-1] + 1), tuple(keys[n][len(prefix) :] for n in at)

        self.turn, self.turn_keys = part("trn_")
        self.message, self.message_keys = part("msg_")
        self.event_keys = tuple(column.key for column in events.c)
        self.event = slice(keys.index(self.event_keys[0]), keys.index(self.event_keys[-1]) + 1)
        self.seq = keys.index("seq")
        self.message_id = self.message.start + self.message_keys.index("id")
        self.turn_id = self.turn.start + self.turn_keys.index("id")

    def view(self, row: Sequence[Any]) -> EventView:
        event = dict(zip(self.event_keys, row[self.event], strict=True))
        message = None
        if row[self.message_id] is not None:
            message = _message_view(dict(zip(self.message_keys, row[self.message], strict=True)))
        turn = None
        if row[self.turn_id] is not None and event["type"].startswith("turn."):
            turn = _turn_view(dict(zip(self.turn_keys, row[self.turn], strict=True)))
        return EventView(
            seq=event["seq"],
            type=event["type"],
            conversation_id=event["conversation_id"],
            turn_id=event["turn_id"],
            created_at=_aware(event["created_at"]),
            status=event["status"],
            attempt=event["attempt"],
            message_seq=event["message_seq"],
            message=message,
            turn=turn,
            data=event["data"],
        )


_HEAD_EVENT_SEQ, _HEAD_STATUS, _HEAD_OWNER, _HEAD_LAST_MESSAGE = range(4)  # (EVENTS_PAGE's first)
_PAGE = _EventRow(EVENTS_PAGE)
_EVENT_ROW = _EventRow(_events_with_rows())


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


def _conversation_view(row: Any, message_views: list[MessageView]) -> ConversationView:
    return ConversationView(
        id=row.id,
        owner=row.owner,
        status=row.status,
        error=row.error,
        model=row.model,
        instructions=row.instructions,
        tools=list(row.allowed_tools or []),
        tool_choice=row.tool_choice,
        context=row.context,
        client_tools=list(row.client_tools or []),
        approval_tools=list(row.approval_tools or []),
        clarify=bool(row.clarify),
        context_policy=row.context_policy,
        output_schema=row.output_schema,
        fallback_models=list(row.fallback_models or []),
        iterations=row.iterations,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cost_usd=_dollars(row.cost_usd),
        cached_tokens=row.cached_tokens,
        turn_number=row.turn_number,
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
        messages=message_views,
        forked_from=row.forked_from,
        forked_at_seq=row.forked_at_seq,
    )


def _dollars(value: Decimal | float | None) -> float | None:
    """A stored cost as a number; None stays None (unknown, not zero)."""
    return None if value is None else float(value)


def _turn_view(row: Any) -> TurnView:
    return TurnView(
        id=row["id"],
        conversation_id=row["conversation_id"],
        number=row["number"],
        status=row["status"],
        kind=row["kind"],
        message_seq=row["message_seq"],
        idempotency_key=row["idempotency_key"],
        error=row["error"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"],
        cost_usd=_dollars(row["cost_usd"]),
        created_at=_aware(row["created_at"]),
        started_at=_maybe_aware(row["started_at"]),
        finished_at=_maybe_aware(row["finished_at"]),
        cancel_requested_at=_maybe_aware(row["cancel_requested_at"]),
        actions=tuple(
            ActionView(
                a["call_id"],
                a["kind"],
                a["name"],
                dict(a.get("arguments") or {}),
                decision=a.get("decision"),
                reason=a.get("reason"),
            )
            for a in row.get("actions") or ()
        ),
        metadata=row.get("caller_metadata"),
        output_schema=row.get("output_schema"),
        model=row.get("model"),
    )


def _maybe_aware(moment: datetime | None) -> datetime | None:
    return None if moment is None else _aware(moment)


def _message_view(row: Any) -> MessageView:
    row = row if isinstance(row, dict) else row._mapping
    return MessageView(
        seq=row["seq"],
        role=row["role"],
        content=row["content"],
        tool_calls=list(row["tool_calls"] or []),
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        is_error=row["is_error"],
        created_at=_aware(row["created_at"]),
        reply_stream=row.get("reply_stream"),
        usage=row.get("usage"),
        parent_seq=row.get("parent_seq"),
        active=bool(row.get("active", True)),
        output=row.get("output"),
        files=[shown(entry) for entry in row.get("files") or ()],
    )


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
