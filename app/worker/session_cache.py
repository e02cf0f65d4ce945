"""**No I/O**: the text of the session tool cache. What the model's context gets of an MCP call's
output (`compact`: at most `limit` characters and a marker saying how to read on), and what the
built-in tools `session_cache_list` and `session_cache_get` answer, from rows the store read.

The whole output is kept in `tool_outputs` (written with the tool message, `store/journal.py`);
the model pages through it by the call's id instead of calling the tool again, on this turn or
any later one of the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from app.models import SESSION_CACHE_GET, SESSION_CACHE_LIST
from app.worker.ports import ToolResult
from app.worker.store import ListedOutput, OutputPage

LIST, GET = SESSION_CACHE_LIST, SESSION_CACHE_GET
TOOLS = frozenset({LIST, GET})
LISTED = 50  # the most recent outputs `session_cache_list` shows
ARGUMENTS_SHOWN = 200  # characters of a call's arguments in the list


def compact(call_id: str, text: str, limit: int) -> str:
    """What the model's context holds of a kept output: the whole when it fits, else its first
    `limit` characters and how to read the rest."""
    if len(text) <= limit:
        return text
    more = json.dumps({"id": call_id, "offset": limit})
    return (
        f"{text[:limit]}\n[... {limit:,} of {len(text):,} characters shown. The whole output "
        f"is kept: call {GET} with {more} to read on.]"
    )


def truncate(text: str, limit: int) -> str:
    """What the model's context holds of an output nobody keeps (the cache is off)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... output truncated: {limit} of {len(text)} characters shown]"


class PageRequest(NamedTuple):
    call_id: str
    offset: int
    limit: int


def page_request(arguments: dict[str, Any], limit: int) -> PageRequest:
    """`session_cache_get`'s arguments (checked against its schema already), the page size
    capped at `limit`, what one tool result may hold in context."""
    size = int(arguments.get("limit") or limit)
    return PageRequest(str(arguments["id"]), int(arguments.get("offset") or 0), min(size, limit))


def page(request: PageRequest, found: OutputPage | None) -> ToolResult:
    """`session_cache_get`'s answer: the page with where it lies in the whole, and how to read
    on; an error result for an id nothing was kept for, or an offset past the end."""
    if found is None:
        return ToolResult(
            f"Error: no output is kept under id {request.call_id!r} in this conversation. "
            f"Call {LIST} to see the ids of the outputs kept.",
            is_error=True,
        )
    if request.offset >= found.chars and found.chars > 0:
        return ToolResult(
            f"Error: offset {request.offset} is past the end of output {found.call_id!r} "
            f"({found.chars:,} characters).",
            is_error=True,
        )
    end = request.offset + len(found.text)
    status = " (the call failed)" if found.is_error else ""
    head = (
        f"[output of {found.tool}, id {found.call_id}{status}: characters "
        f"{request.offset:,}-{end:,} of {found.chars:,}]"
    )
    if end >= found.chars:
        return ToolResult(f"{head}\n{found.text}\n[end of output]")
    more = json.dumps({"id": found.call_id, "offset": end})
    tail = f"[... {found.chars - end:,} characters follow: call {GET} with {more}]"
    return ToolResult(f"{head}\n{found.text}\n{tail}")


def listing(outputs: Sequence[ListedOutput], total: int, tool: str | None = None) -> ToolResult:
    """`session_cache_list`'s answer: the kept outputs, oldest first, as JSON."""
    entries = [
        {
            "id": output.call_id,
            "tool": output.tool,
            "arguments": _shown(output.arguments),
            "characters": output.chars,
            **({"failed": True} if output.is_error else {}),
            "turn": output.turn,
        }
        for output in outputs
    ]
    answer: dict[str, Any] = {"outputs": entries}
    if total > len(entries):
        answer["older_not_listed"] = total - len(entries)
    if not entries:
        which = f" of {tool}" if tool else ""
        answer["note"] = f"No tool output{which} is kept in this conversation yet."
    else:
        answer["read"] = f'{GET} {{"id": ..., "offset": 0}} returns an output\'s text'
    return ToolResult(json.dumps(answer, ensure_ascii=False))


def _shown(arguments: dict[str, Any]) -> dict[str, Any] | str:
    text = json.dumps(arguments, ensure_ascii=False)
    if len(text) <= ARGUMENTS_SHOWN:
        return arguments
    return text[:ARGUMENTS_SHOWN] + "..."


__all__ = [
    "GET",
    "LIST",
    "LISTED",
    "TOOLS",
    "PageRequest",
    "compact",
    "listing",
    "page",
    "page_request",
    "truncate",
]
