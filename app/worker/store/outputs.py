"""The session tool cache's reads (`tool_outputs`): what a conversation's MCP calls returned, in
whole, for the worker's built-in `session_cache_list` and `session_cache_get`: those of the
active path only (the tool messages on it), as the model is sent nothing of another branch.

Written with the call's tool message, in the same fenced statement (`journal`); read here, by
whichever worker holds the conversation. A page is cut in the database (`substr`), so reading
the end of a large output never moves the whole of it.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from sqlalchemy import Engine, and_, func, select

from app.models.tables import messages, tool_outputs, turns

# Only the outputs of tool messages on the active path: another branch's are never sent.
_ON_PATH = messages.alias("on_path")


def _on_path() -> Any:
    return and_(
        _ON_PATH.c.conversation_id == tool_outputs.c.conversation_id,
        _ON_PATH.c.seq == tool_outputs.c.seq,
        _ON_PATH.c.active,
    )


class ListedOutput(NamedTuple):
    """One kept output, as `session_cache_list` shows it."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    chars: int
    is_error: bool
    turn: int  # the conversation's turn number


class OutputPage(NamedTuple):
    """Characters `offset` .. `offset + len(text)` of a kept output of `chars` characters."""

    call_id: str
    tool: str
    chars: int
    is_error: bool
    offset: int
    text: str


def list_outputs(
    engine: Engine, conversation_id: uuid.UUID, *, tool: str | None, limit: int
) -> tuple[list[ListedOutput], int]:
    """The most recent `limit` outputs (of `tool`, when given), oldest first, and how many
    there are in all."""
    query = (
        select(
            tool_outputs.c.call_id,
            tool_outputs.c.tool,
            tool_outputs.c.arguments,
            tool_outputs.c.chars,
            tool_outputs.c.is_error,
            func.coalesce(turns.c.number, 0),  # (0: copied into a fork, by no turn of it)
            func.count().over().label("total"),
        )
        .outerjoin(turns, turns.c.id == tool_outputs.c.turn_id)
        .join(_ON_PATH, _on_path())
        .where(tool_outputs.c.conversation_id == conversation_id)
        .order_by(tool_outputs.c.seq.desc())
        .limit(limit)
    )
    if tool is not None:
        query = query.where(tool_outputs.c.tool == tool)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    total = rows[0].total if rows else 0
    listed = [ListedOutput(*row[:6]) for row in reversed(rows)]
    return listed, total


def read_output(
    engine: Engine, conversation_id: uuid.UUID, call_id: str, *, offset: int, limit: int
) -> OutputPage | None:
    """Up to `limit` characters of the output of `call_id` from `offset` (0-based); None when
    the conversation kept no output for that call."""
    query = select(
        tool_outputs.c.call_id,
        tool_outputs.c.tool,
        tool_outputs.c.chars,
        tool_outputs.c.is_error,
        func.substr(tool_outputs.c.content, offset + 1, limit),
    ).join(_ON_PATH, _on_path())
    query = query.where(
        tool_outputs.c.conversation_id == conversation_id, tool_outputs.c.call_id == call_id
    )
    with engine.connect() as connection:
        row = connection.execute(query).one_or_none()
    if row is None:
        return None
    found_id, tool, chars, is_error, text = row
    return OutputPage(found_id, tool, chars, bool(is_error), offset, text or "")


__all__ = ["ListedOutput", "OutputPage", "list_outputs", "read_output"]
