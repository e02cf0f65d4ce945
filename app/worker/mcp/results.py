"""What a tool call comes back as: the text the model reads (rendered content, capped output or
an error message), and the failures worth telling apart (a disconnect) in brief.
"""

from __future__ import annotations

import json

import anyio
from mcp import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from app.worker.ports import TOOL_ERROR, ToolResult


def render_result(name: str, result: CallToolResult) -> str:
    text = "\n".join(_describe_content(item) for item in result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if not text:
        text = f"Tool {name} failed without a message" if result.is_error else "(no output)"
    return text


def capped_result(text: str, is_error: bool, limit: int) -> ToolResult:
    if len(text) > limit:
        marker = f"\n[... output truncated: {limit} of {len(text)} characters shown]"
        text = text[:limit] + marker
    return ToolResult(content=text, is_error=is_error)


def error_result(message: str, outcome: str = TOOL_ERROR) -> ToolResult:
    return ToolResult(content=message, is_error=True, outcome=outcome)


def is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(
        exc,
        OSError
        | EOFError
        | anyio.BrokenResourceError
        | anyio.ClosedResourceError
        | anyio.EndOfStream,
    )


def brief(exc: BaseException) -> str:
    """`Type: message` of the innermost cause of a one-exception group chain."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = exc.message if isinstance(exc, MCPError) else str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _describe_content(item: object) -> str:
    if isinstance(item, TextContent):
        return item.text
    if isinstance(item, EmbeddedResource):
        resource = item.resource
        if isinstance(resource, TextResourceContents):
            return resource.text
        return f"[{resource.mime_type or 'binary'} resource {resource.uri}]"
    if isinstance(item, ResourceLink):
        return f"[resource link: {item.uri}]"
    mime_type = getattr(item, "mime_type", None)
    return f"[{mime_type or getattr(item, 'type', 'unknown')} content]"
