"""The web side's SQL of the message tree: a message found by its seq, the active path cut or
moved, a message's versions (its siblings), and a path copied into a fork.

Every message names its parent (`messages.parent_seq`, always an older one) and whether it is on
the active path (`messages.active`); the active path runs from a root to the newest active
message, the leaf. Moving the path is cheap because a path's seqs only grow: cutting it after a
message on it is one UPDATE of the active messages past that seq (after a message of another
branch, the path moves to that branch first: an edit or a regenerate there applies to its own
path). Flat functions over the caller's `Connection`, after `lock_conversation`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import Connection, func, insert, select, update

from app.errors import MessageNotFound
from app.files import store as files
from app.models.tables import messages, tool_outputs


class Node(NamedTuple):
    """A message as the tree sees it."""

    seq: int
    parent_seq: int | None
    role: str
    active: bool
    tool_calls: list[dict[str, Any]] | None


def node(connection: Connection, conversation_id: uuid.UUID, seq: int) -> Node:
    """The message `seq` of the conversation; `MessageNotFound` when it has none."""
    found = connection.execute(
        select(
            messages.c.seq,
            messages.c.parent_seq,
            messages.c.role,
            messages.c.active,
            messages.c.tool_calls,
        ).where(messages.c.conversation_id == conversation_id, messages.c.seq == seq)
    ).one_or_none()
    if found is None:
        raise MessageNotFound(f"conversation {conversation_id} has no message {seq}")
    return Node(*found)


def path_to(connection: Connection, conversation_id: uuid.UUID, leaf: int) -> list[Node]:
    """The path from a root to `leaf`, in order (a recursive walk up the parents)."""
    up = (
        select(*_NODE_COLUMNS)
        .where(messages.c.conversation_id == conversation_id, messages.c.seq == leaf)
        .cte("path", recursive=True)
    )
    parent = messages.alias("parent")
    up = up.union_all(
        select(
            parent.c.seq, parent.c.parent_seq, parent.c.role, parent.c.active, parent.c.tool_calls
        ).where(parent.c.conversation_id == conversation_id, parent.c.seq == up.c.parent_seq)
    )
    return [Node(*row) for row in connection.execute(select(up).order_by(up.c.seq))]


def newest_under(connection: Connection, conversation_id: uuid.UUID, seq: int) -> int:
    """The newest message of the subtree under `seq` (itself included): the leaf a switch to
    that version goes to: the version's latest state."""
    down = (
        select(messages.c.seq)
        .where(messages.c.conversation_id == conversation_id, messages.c.seq == seq)
        .cte("subtree", recursive=True)
    )
    child = messages.alias("child")
    down = down.union_all(
        select(child.c.seq).where(
            child.c.conversation_id == conversation_id, child.c.parent_seq == down.c.seq
        )
    )
    return int(connection.execute(select(func.max(down.c.seq))).scalar_one())


def text_of(connection: Connection, conversation_id: uuid.UUID, seq: int) -> str:
    """The message's text (a user message's, for a regenerate)."""
    found = connection.execute(
        select(messages.c.content).where(
            messages.c.conversation_id == conversation_id, messages.c.seq == seq
        )
    ).scalar_one()
    return str(found or "")


def files_of(connection: Connection, conversation_id: uuid.UUID, seq: int) -> list[Any] | None:
    """The files the message carries (None: none)."""
    found = connection.execute(
        select(messages.c.files).where(
            messages.c.conversation_id == conversation_id, messages.c.seq == seq
        )
    ).scalar_one()
    return list(found) if found else None


def unanswered_calls(
    connection: Connection, conversation_id: uuid.UUID, path: list[Node], on_path: set[int]
) -> list[str]:
    """The ids of the calls made on `path` whose result is not on it (`on_path`: its seqs)."""
    called = [str(call["id"]) for node in path for call in node.tool_calls or ()]
    if not called:
        return []
    answered = {
        str(call_id)
        for call_id, seq in connection.execute(
            select(messages.c.tool_call_id, messages.c.seq).where(
                messages.c.conversation_id == conversation_id,
                messages.c.tool_call_id.in_(called),
            )
        )
        if seq in on_path
    }
    return [call for call in called if call not in answered]


def cut_after(connection: Connection, conversation_id: uuid.UUID, seq: int | None) -> bool:
    """The active path ends at `seq`, a message of any branch (None: it is emptied, a new root
    follows): on the path, every active message past it leaves (one UPDATE); on another branch,
    the path moves to it (`move_to`). Whether anything changed."""
    if seq is not None and not node(connection, conversation_id, seq).active:
        return move_to(connection, conversation_id, seq)
    query = update(messages).where(messages.c.conversation_id == conversation_id, messages.c.active)
    if seq is not None:
        query = query.where(messages.c.seq > seq)
    return bool(connection.execute(query.values(active=False)).rowcount)


def move_to(connection: Connection, conversation_id: uuid.UUID, leaf: int) -> bool:
    """The active path becomes the one from a root to `leaf`: its messages active, every other
    message inactive. Whether anything changed."""
    on_path = [node.seq for node in path_to(connection, conversation_id, leaf)]
    mine = messages.c.conversation_id == conversation_id
    left = connection.execute(
        update(messages)
        .where(mine, messages.c.active, messages.c.seq.not_in(on_path))
        .values(active=False)
    ).rowcount
    joined = connection.execute(
        update(messages)
        .where(mine, ~messages.c.active, messages.c.seq.in_(on_path))
        .values(active=True)
    ).rowcount
    return bool(left or joined)


def versions(
    connection: Connection, conversation_id: uuid.UUID, parents: Iterable[int | None]
) -> dict[int | None, list[int]]:
    """For each parent (None: the roots) that has more than one child, its children's seqs in
    order: the versions a chat page offers as "2 / 3"."""
    wanted = {0 if parent is None else parent for parent in parents}
    if not wanted or not has_versions(connection, conversation_id):
        return {}  # (one probe of the partial index of inactive messages: most never branch)
    parent = func.coalesce(messages.c.parent_seq, 0)
    rows = connection.execute(
        select(parent, messages.c.seq)
        .where(messages.c.conversation_id == conversation_id, parent.in_(sorted(wanted)))
        .order_by(messages.c.seq)
    )
    children: dict[int | None, list[int]] = defaultdict(list)
    for of, seq in rows:
        children[of or None].append(seq)
    return {of: seqs for of, seqs in children.items() if len(seqs) > 1}


def has_versions(connection: Connection, conversation_id: uuid.UUID) -> bool:
    """Whether any message of the conversation is off its active path (`ix_messages_inactive`)."""
    inactive = select(messages.c.seq).where(
        messages.c.conversation_id == conversation_id, ~messages.c.active
    )
    return connection.execute(select(inactive.exists())).scalar_one()


def copy_path(
    connection: Connection, source: uuid.UUID, target: uuid.UUID, path: list[Node]
) -> dict[int, int]:
    """The messages of `path` copied into the conversation `target` as its single path,
    numbered 1..n, with the session cache's kept outputs of its tool results; the new seq of
    each copied one. (A copy, not a share: every conversation keeps its own rows, deleted,
    pruned and owned with it; the files its messages hold are used by it too.)"""
    renumbered = {node.seq: n for n, node in enumerate(path, start=1)}
    columns = [
        column
        for column in messages.c
        if column.key not in ("id", "conversation_id", "seq", "parent_seq", "active")
    ]
    rows = connection.execute(
        select(messages.c.seq, *columns).where(
            messages.c.conversation_id == source, messages.c.seq.in_(list(renumbered))
        )
    ).all()
    if rows:
        connection.execute(
            insert(messages),
            [
                {
                    **{column.key: row._mapping[column.key] for column in columns},
                    "conversation_id": target,
                    "seq": renumbered[row.seq],
                    "parent_seq": renumbered[row.seq] - 1 or None,
                    "active": True,
                }
                for row in rows
            ],
        )
        # (the files its messages hold are the fork's too: they live while it does)
        held = {file["id"] for row in rows for file in row._mapping["files"] or ()}
        files.use(connection, (uuid.UUID(str(found)) for found in held), target)
    kept = [c for c in tool_outputs.c if c.key not in ("id", "conversation_id", "seq", "turn_id")]
    outputs = connection.execute(
        select(tool_outputs.c.seq, *kept).where(
            tool_outputs.c.conversation_id == source,
            tool_outputs.c.seq.in_(list(renumbered)),
        )
    ).all()
    if outputs:  # (no turn of the fork made them)
        connection.execute(
            insert(tool_outputs),
            [
                {
                    **{column.key: row._mapping[column.key] for column in kept},
                    "conversation_id": target,
                    "seq": renumbered[row.seq],
                    "turn_id": None,
                }
                for row in outputs
            ],
        )
    return renumbered


_NODE_COLUMNS = (
    messages.c.seq,
    messages.c.parent_seq,
    messages.c.role,
    messages.c.active,
    messages.c.tool_calls,
)

__all__ = [
    "Node",
    "copy_path",
    "cut_after",
    "files_of",
    "has_versions",
    "move_to",
    "newest_under",
    "node",
    "path_to",
    "text_of",
    "unanswered_calls",
    "versions",
]
