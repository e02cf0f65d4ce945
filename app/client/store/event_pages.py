"""The event log read: a page of a conversation's committed events after a cursor, with the turn
and the message each names, in one statement built once (`EVENTS_PAGE`, which `loop_store` awaits
too), and a turn's events for its record.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, select

from app.client.store.row_views import aware, message_of_row, turn_of_row
from app.client.views import EventPage, EventView
from app.errors import ConversationNotFound, InvalidCursor
from app.models.tables import conversations, events, messages, turns

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
            message = message_of_row(dict(zip(self.message_keys, row[self.message], strict=True)))
        turn = None
        if row[self.turn_id] is not None and event["type"].startswith("turn."):
            turn = turn_of_row(dict(zip(self.turn_keys, row[self.turn], strict=True)))
        return EventView(
            seq=event["seq"],
            type=event["type"],
            conversation_id=event["conversation_id"],
            turn_id=event["turn_id"],
            created_at=aware(event["created_at"]),
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


__all__ = ["EVENTS_PAGE", "events_page", "page_parameters", "read_events", "turn_events"]
