"""The message tree as the claim sees it: whether a starting turn moves the active path, the move
itself (a part of the claim's statement), and the call ids the other branches' results took.

A turn that says where its messages hang (an edit, a regenerate, a rollback, queued behind
another) names a point: a message of any branch, or 0 for a new root. As it starts, the active
path becomes the one from a root to that point:

    the point                    what the claim's move writes
    ---------------------------  --------------------------------------------------------------
    on the path (or 0)           the active messages past it leave the path (a cut)
    on another branch            the path moves to its branch: the messages from a root to it
                                   join, every other active one leaves
    the path already ends there  nothing (a path the web side moved at rest, or a claim again)

The active messages are always one path from a root (a message's parent is older, so a path's
seqs only grow): a point that is on it has its whole path on it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    FromClause,
    String,
    Update,
    and_,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from app.models.tables import messages

CALL_ID_SEPARATOR = "\x1f"  # (the ASCII unit separator: no provider's call id holds it)


class joined_call_ids(FunctionElement[str]):  # noqa: N801 (a SQL function's name)
    """Call ids joined by CALL_ID_SEPARATOR: `string_agg` on PostgreSQL, `group_concat`
    elsewhere (SQLAlchemy's own `aggregate_strings` binds its separator after compiling, which
    a statement compiled once cannot)."""

    type = String()
    inherit_cache = True


@compiles(joined_call_ids, "postgresql")
def _string_agg(element: joined_call_ids, compiler: Any, **kw: Any) -> str:
    return f"string_agg({compiler.process(element.clauses, **kw)}, chr(31))"


@compiles(joined_call_ids)
def _group_concat(element: joined_call_ids, compiler: Any, **kw: Any) -> str:
    return f"group_concat({compiler.process(element.clauses, **kw)}, char(31))"


def moves(conversation: Any, point: Any) -> ColumnElement[bool]:
    """Whether the active path does not end at `point` yet: something is past it, or the point
    (not 0) is off the path."""
    active = and_(messages.c.conversation_id == conversation, messages.c.active)
    past = select(messages.c.seq).where(active, messages.c.seq > point).exists()
    on_path = select(messages.c.seq).where(active, messages.c.seq == point).exists()
    return or_(past, and_(point > 0, ~on_path))


def path_up(conversation: Any, point: Any) -> CTE:
    """The seqs from `point` up its parents to a root (none for 0): a recursive walk."""
    up = (
        select(messages.c.seq, messages.c.parent_seq)
        .where(messages.c.conversation_id == conversation, messages.c.seq == point)
        .cte("path_up", recursive=True)
    )
    parent = messages.alias("path_parent")
    return up.union_all(
        select(parent.c.seq, parent.c.parent_seq).where(
            parent.c.conversation_id == conversation, parent.c.seq == up.c.parent_seq
        )
    )


def move_path(fenced: FromClause) -> Update:
    """The claim's part: when the starting turn moves the path (`fenced.cuts`), the active
    messages become those of the path from a root to `fenced.cut_at`. (Before the promoted
    message goes in: on databases that run the parts one by one it would leave the path too.)"""
    conversation = select(fenced.c.id).scalar_subquery()
    on_new_path = messages.c.seq.in_(
        select(path_up(conversation, select(fenced.c.cut_at).scalar_subquery()).c.seq)
    )
    return (
        update(messages)
        .where(
            messages.c.conversation_id == conversation,
            select(fenced.c.id).where(fenced.c.cuts).exists(),
            or_(and_(messages.c.active, ~on_new_path), and_(~messages.c.active, on_new_path)),
        )
        .values(active=on_new_path)
    )


def other_branch_calls(conversation: Any, moving: ColumnElement[bool]) -> Any:
    """The call ids of results off the active path, joined (`joined_call_ids`): a new call's id
    is made unique against them too (the results' unique constraint spans the tree). When the
    claim moves the path (`moving`), the results on the path it leaves count too: the claim
    returns what its snapshot saw, before the move."""
    results = and_(messages.c.conversation_id == conversation, messages.c.tool_call_id.is_not(None))
    taken = union_all(
        select(messages.c.tool_call_id).where(results, ~messages.c.active),
        select(messages.c.tool_call_id).where(results, messages.c.active, moving),
    ).subquery("taken")
    return select(joined_call_ids(taken.c.tool_call_id)).scalar_subquery()


__all__ = [
    "CALL_ID_SEPARATOR",
    "joined_call_ids",
    "move_path",
    "moves",
    "other_branch_calls",
    "path_up",
]
