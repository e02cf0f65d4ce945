"""The tools the worker offers itself, never sent to an MCP server: `agent_clarify` (the model
asks the user a question; the turn waits for the answer), and the conversation's client-executed
tools (the web app's client runs them; the turn waits for their output). `toolset` builds what a
turn offers beyond its MCP tools, and which of those tools wait for the user (`plan.Toolbox`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.models import CLARIFICATION, CLARIFY_TOOL, CLIENT_TOOL
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
    waits = {d.name: CLIENT_TOOL for d in definitions}
    if clarify:
        definitions.append(CLARIFY_DEFINITION)
        waits[CLARIFY] = CLARIFICATION
    return definitions, waits


__all__ = ["CLARIFY", "CLARIFY_DEFINITION", "client_definitions", "toolset"]
