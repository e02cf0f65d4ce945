"""The tools the worker offers itself, never sent to an MCP server: `agent_clarify` (the model
asks the user a question; the turn waits for the answer), the conversation's client-executed
tools (the web app's client runs them; the turn waits for their output), and the session tool
cache's `session_cache_list` and `session_cache_get` (the worker reads earlier outputs for the
model; `session_cache`). `toolset` builds what a turn offers beyond its MCP tools, and which of
those tools wait for the user (`offer.Toolbox`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.models import (
    CLARIFICATION,
    CLARIFY_TOOL,
    CLIENT_TOOL,
    SESSION_CACHE_GET,
    SESSION_CACHE_LIST,
)
from app.worker.ports import ToolDefinition

CLARIFY = CLARIFY_TOOL
CLARIFY_DEFINITION = ToolDefinition(
    name=CLARIFY,
    description=(
        "Ask the user a question when you cannot go on without their answer (which of several "
        "things they mean, a missing detail, a choice only they can make). Ask one short, "
        "specific question; do not use it for what you can look up or reasonably assume. The "
        "user's reply comes back as this tool's result."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "description": "The question."},
            "reason": {"type": "string", "description": "Why you need to know (optional)."},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    server="builtin",
    original_name=CLARIFY,
)


_READ_ONLY = {"readOnlyHint": True, "idempotentHint": True}


def cache_definitions(limit: int) -> list[ToolDefinition]:
    """`session_cache_list` and `session_cache_get`; a page holds at most `limit` characters."""
    listing = ToolDefinition(
        name=SESSION_CACHE_LIST,
        description=(
            "List the tool outputs kept from earlier calls in this conversation (id, tool, "
            "arguments, size), newest last. Long outputs are shown to you cut short; read them "
            f"whole with {SESSION_CACHE_GET} rather than calling the tool again."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "tool": {"type": "string", "description": "Only the outputs of this tool."}
            },
            "additionalProperties": False,
        },
        server="builtin",
        original_name=SESSION_CACHE_LIST,
        annotations=_READ_ONLY,
    )
    get = ToolDefinition(
        name=SESSION_CACHE_GET,
        description=(
            "Read a kept tool output by its id (the tool call's id), a page at a time: "
            f"characters offset to offset + limit (at most {limit})."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 1, "description": "The call's id."},
                "offset": {"type": "integer", "minimum": 0, "description": "Default 0."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": limit,
                    "description": f"Characters to read, default and at most {limit}.",
                },
            },
            "required": ["id"],
            "additionalProperties": False,
        },
        server="builtin",
        original_name=SESSION_CACHE_GET,
        annotations=_READ_ONLY,
    )
    return [listing, get]


def client_definitions(client_tools: Iterable[Mapping[str, Any]]) -> list[ToolDefinition]:
    """A conversation's client-executed tools ({"name", "description", "parameters"})."""
    return [
        ToolDefinition(
            name=str(tool["name"]),
            description=str(tool.get("description") or ""),
            input_schema=dict(tool.get("parameters") or {"type": "object", "properties": {}}),
            server="client",
            original_name=str(tool["name"]),
        )
        for tool in client_tools
    ]


def toolset(
    client_tools: Iterable[Mapping[str, Any]], clarify: bool
) -> tuple[list[ToolDefinition], dict[str, str]]:
    """What a turn offers beyond its MCP tools, and the action kind each of them waits on."""
    definitions = client_definitions(client_tools)
    action_kinds = {d.name: CLIENT_TOOL for d in definitions}
    if clarify:
        definitions.append(CLARIFY_DEFINITION)
        action_kinds[CLARIFY] = CLARIFICATION
    return definitions, action_kinds


__all__ = [
    "CLARIFY",
    "CLARIFY_DEFINITION",
    "cache_definitions",
    "client_definitions",
    "toolset",
]
