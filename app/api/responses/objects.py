"""The Responses API's objects built from a turn: the response, its input items. Pure.

Usage is counted per turn: the turn's last response carries the turn's tokens (cached tokens
are not counted yet: 0); an earlier response of the same turn, which ended at a pause, has
`usage: null`.

What a response shows back of its request is read from what was committed, so it is the same on
create, retrieve and every replay of its stream: `store` and, for a turn's first response, the
`previous_response_id` it was created after (`turns.echo`; a later response of the same turn
follows the one before it); `tool_choice` is the conversation's, a forced tool as the object
naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.api.responses.errors import ResponseNotFound
from app.api.responses.ids import ResponseId
from app.api.responses.translate import (
    Segment,
    Tools,
    response_status,
    segments,
)
from app.client.tool_choice import ToolChoice
from app.client.views import TurnRecord

#: A response's `truncation`: a conversation's context is compacted as it grows toward the model's
#: window (earlier outputs elided, the oldest messages summarised: app/worker/context.py), never
#: refused for its length: OpenAI's `auto`.
TRUNCATION = "auto"


def tools_of(record: TurnRecord, servers: Mapping[str, str]) -> Tools:
    return Tools(record.conversation.client_answered, dict(servers))


def segment_of(record: TurnRecord, response: ResponseId, servers: Mapping[str, str]) -> Segment:
    found = segments(record.turn, record.events, tools_of(record, servers))
    if response.segment >= len(found):
        raise ResponseNotFound(f"no response {response}")
    return found[response.segment]


def response_count(record: TurnRecord) -> int:
    """How many responses the turn has so far (the last one is its current)."""
    return len(segments(record.turn, record.events, tools_of(record, {})))


def response_object(
    record: TurnRecord,
    response: ResponseId,
    servers: Mapping[str, str],
    *,
    background: bool | None = None,
) -> dict[str, Any]:
    """The response as OpenAI's `Response` object."""
    all_segments = segments(record.turn, record.events, tools_of(record, servers))
    if response.segment >= len(all_segments):
        raise ResponseNotFound(f"no response {response}")
    segment = all_segments[response.segment]
    last = response.segment == len(all_segments) - 1
    turn, conversation = record.turn, record.conversation
    status = response_status(turn, segment)
    error = None
    if status == "failed":
        error = {"code": _error_code(turn.error), "message": turn.error or "the turn failed"}
    finished = status in ("completed", "failed", "cancelled", "incomplete")
    return {
        "id": str(response),
        "object": "response",
        "created_at": turn.created_at.timestamp(),
        "completed_at": turn.finished_at.timestamp()
        if finished and last and turn.finished_at is not None
        else None,
        "status": status,
        "model": turn.model or conversation.model,
        "instructions": conversation.instructions,
        "output": segment.output,
        "text": text_echo(turn.output_schema),
        "error": error,
        "incomplete_details": None,
        "truncation": TRUNCATION,
        "metadata": dict(record.turn.metadata or {}),
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tools": _tools_echo(record, servers),
        "background": background,
        "conversation": {"id": str(conversation.id)},
        "usage": _usage(record) if last else None,
        **_request_echo(record, response),
    }


def initial_object(record: TurnRecord, response: ResponseId, servers: Mapping[str, str]) -> Any:
    """The response as a stream's first events show it, the same on every replay: its setup,
    no output, no usage; `status` filled in by the caller."""

    def snapshot(status: str) -> dict[str, Any]:
        return {
            "id": str(response),
            "object": "response",
            "created_at": record.turn.created_at.timestamp(),
            "completed_at": None,
            "status": status,
            "model": record.conversation.model,
            "instructions": record.conversation.instructions,
            "output": [],
            "text": text_echo(record.turn.output_schema),
            "error": None,
            "incomplete_details": None,
            "truncation": TRUNCATION,
            "metadata": dict(record.turn.metadata or {}),
            "parallel_tool_calls": True,
            "temperature": None,
            "top_p": None,
            "tools": _tools_echo(record, servers),
            "background": None,
            "conversation": {"id": str(record.conversation.id)},
            "usage": None,
            **_request_echo(record, response),
        }

    return snapshot


def text_echo(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """`text` as OpenAI shows it: the format the turn's answer had to take."""
    if schema is None:
        return {"format": {"type": "text"}}
    if schema.get("name") == "json_object" and schema.get("schema") == {"type": "object"}:
        return {"format": {"type": "json_object"}}
    return {"format": {"type": "json_schema", **schema}}


def input_items(record: TurnRecord, response: ResponseId, servers: Mapping[str, str]) -> list[Any]:
    return list(segment_of(record, response, servers).input)


def _request_echo(record: TurnRecord, response: ResponseId) -> dict[str, Any]:
    """`tool_choice`, `previous_response_id` and `store` as the response shows them back."""
    turn, conversation = record.turn, record.conversation
    echo = turn.echo or {}  # (none: a turn of our own API, or of the previous release)
    previous = echo.get("previous_response_id")
    if response.segment > 0:  # (after a pause: the response before it, of the same turn)
        previous = str(ResponseId(turn.id, response.segment - 1))
    choice = ToolChoice(conversation.tool_choice, conversation.forced_tool)
    return {
        "tool_choice": choice.responses_shape(),
        "previous_response_id": previous,
        "store": echo.get("store", True),
    }


def _usage(record: TurnRecord) -> dict[str, Any]:
    turn = record.turn
    return {
        "input_tokens": turn.prompt_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": turn.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }


def _tools_echo(record: TurnRecord, servers: Mapping[str, str]) -> list[dict[str, Any]]:
    conversation = record.conversation
    echoed: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": tool["name"],
            "description": tool.get("description") or None,
            "parameters": tool.get("parameters"),
            "strict": False,
        }
        for tool in conversation.client_tools
    ]
    by_server: dict[str, list[str]] = {}
    for name in conversation.tools:
        by_server.setdefault(servers.get(name, "chatworker"), []).append(name)
    asked = set(conversation.approval_tools)
    for label, names in by_server.items():
        echo: dict[str, Any] = {
            "type": "mcp",
            "server_label": label,
            "allowed_tools": sorted(names),
        }
        approving = sorted(asked & set(names))
        if approving:
            echo["require_approval"] = (
                "always" if len(approving) == len(names) else {"always": {"tool_names": approving}}
            )
        echoed.append(echo)
    return echoed


def _error_code(error: str | None) -> str:
    text = (error or "").lower()
    if "429" in text or "rate" in text:
        return "rate_limit_exceeded"
    return "server_error"
