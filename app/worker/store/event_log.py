"""The events a fenced conversation UPDATE appends, as one INSERT over the UPDATE's returned row:
numbered from the seqs the UPDATE reserved (`event_seq - n + 1 .. event_seq`, in list order), so
the event log stays gap-free and in commit order; a conditional event is numbered among those kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    CompoundSelect,
    FromClause,
    Insert,
    Integer,
    Select,
    String,
    Uuid,
    case,
    cast,
    func,
    insert,
    literal,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

from app.models import (
    BRANCH_SWITCHED,
    MESSAGE_COMMITTED,
    STATUS_CHANGED,
    TOOL_LOOP,
    TURN_RESUMED,
    TURN_STARTED,
)
from app.models.tables import events
from app.worker.store.fence import NOW, OLD_STATUS, TURN_ID

_JSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


@dataclass(frozen=True)
class Logged:
    """One event a statement appends; `when` (over the source row) makes it conditional."""

    type: str | Any
    message_seq: Any = None
    status: Any = None
    attempt: Any = None
    when: Any = None
    data: Any = None  # a bound JSON parameter (`context.compacted`); most events carry none
    turn: Any = None  # the turn it names, when not the statement's (a steered turn's end)


def log(
    rows_of: Callable[[FromClause], Sequence[Logged]], turn: Any = TURN_ID
) -> Callable[[FromClause], Insert]:
    """An INSERT of the events `rows_of(source)`, numbered from the seqs the head reserved.

    Fixed rows take their seqs by position (`event_seq - n + 1 + k`); rows with a condition are
    numbered by a window over the rows that remain."""

    def part(fenced: FromClause) -> Insert:
        rows = rows_of(fenced)
        turn_id = turn(fenced) if callable(turn) else turn
        columns: tuple[str, ...] = ("type", "message_seq", "status", "attempt")
        if any(row.data is not None for row in rows):
            columns += ("data",)
        if all(row.when is None for row in rows):
            selects = [
                select(
                    fenced.c.id,
                    fenced.c.event_seq - (len(rows) - 1 - k),
                    turn_id if row.turn is None else row.turn,
                    *_values(row, columns),
                    NOW,
                )
                for k, row in enumerate(rows)
            ]
            return insert(events).from_select(
                ["conversation_id", "seq", "turn_id", *columns, "created_at"], _union(selects)
            )
        branches = []
        for k, row in enumerate(rows):
            branch = select(
                literal(k, Integer).label("k"),
                _typed(turn_id if row.turn is None else row.turn, Uuid()).label("turn_id"),
                *(
                    value.label(name)
                    for value, name in zip(_values(row, columns), columns, strict=True)
                ),
            ).select_from(fenced)
            branches.append(branch if row.when is None else branch.where(row.when))
        logged = _union(branches).subquery("logged")
        seq = fenced.c.event_seq - func.count().over() + func.row_number().over(order_by=logged.c.k)
        source = select(
            fenced.c.id, seq, logged.c.turn_id, *(logged.c[name] for name in columns), NOW
        ).select_from(logged.join(fenced, true()))
        return insert(events).from_select(
            ["conversation_id", "seq", "turn_id", *columns, "created_at"], source
        )

    return part


def _values(row: Logged, columns: tuple[str, ...]) -> tuple[Any, ...]:
    """The row's type, message seq, status and attempt (and data), typed (NULLs included)."""
    values: tuple[Any, ...] = (
        _typed(row.type, String()),
        _typed(row.message_seq, Integer()),
        _typed(row.status, String()),
        _typed(row.attempt, Integer()),
    )
    if "data" in columns:
        values += (row.data if row.data is not None else cast(null(), _JSON),)
    return values


def _union(branches: list[Select[Any]]) -> Select[Any] | CompoundSelect[Any]:
    return branches[0] if len(branches) == 1 else union_all(*branches)


def _typed(value: Any, type_: TypeEngine[Any]) -> Any:
    if value is None:
        return cast(null(), type_)
    if isinstance(value, str | int):
        return literal(value, type_)
    return value


def status_changed(fenced: FromClause) -> Logged:
    return Logged(STATUS_CHANGED, status=fenced.c.status, when=fenced.c.status != OLD_STATUS)


def into_tool_loop() -> Logged:
    return Logged(STATUS_CHANGED, status=TOOL_LOOP)


def claim_events(fenced: FromClause) -> list[Logged]:
    started = case((fenced.c.turn_first, literal(TURN_STARTED)), else_=literal(TURN_RESUMED))
    return [
        # the path cut where the starting turn's messages hang: it leaves from there now
        Logged(BRANCH_SWITCHED, message_seq=fenced.c.cut_at, when=fenced.c.cuts),
        Logged(
            MESSAGE_COMMITTED,
            message_seq=fenced.c.message_seq,
            when=fenced.c.turn_input.is_not(None),
        ),
        Logged(started, attempt=fenced.c.attempts),
    ]


__all__ = ["Logged", "claim_events", "into_tool_loop", "log", "status_changed"]
