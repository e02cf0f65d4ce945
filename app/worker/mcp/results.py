"""What a tool call comes back as: the text the model reads (rendered content, capped output or
an error message), and the failures worth telling apart (a disconnect) in brief.
"""

from __future__ import annotations

import base64
import binascii
import json

import anyio
from mcp import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from app.worker.ports import TOOL_ERROR, ToolMedia, ToolResult


def media_of(result: CallToolResult, limit: int) -> tuple[ToolMedia, ...]:
    """The binary parts of a result (images, audio, embedded blobs) up to `limit` bytes each,
    kept whole; a larger or undecodable one is only described."""
    found = []
    for item in result.content:
        media = _media(item)
        if media is not None and len(media.data) <= limit:
            found.append(media)
    return tuple(found)


def _media(item: object) -> ToolMedia | None:
    try:
        if isinstance(item, ImageContent | AudioContent):
            return ToolMedia(item.mime_type, base64.b64decode(item.data, validate=True))
        if isinstance(item, EmbeddedResource) and isinstance(item.resource, BlobResourceContents):
            resource = item.resource
            data = base64.b64decode(resource.blob, validate=True)
            name = str(resource.uri).rstrip("/").rsplit("/", 1)[-1] or None
            return ToolMedia(resource.mime_type or "application/octet-stream", data, name)
    except (binascii.Error, ValueError):
        return None
    return None


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
        size = _size(getattr(resource, "blob", ""))
        return f"[{resource.mime_type or 'binary'} resource {resource.uri}{size}]"
    if isinstance(item, ResourceLink):
        about = ", ".join(part for part in (item.name, item.mime_type, item.description) if part)
        return f"[resource link: {item.uri}{f' ({about})' if about else ''}]"
    if isinstance(item, ImageContent | AudioContent):
        kind = "image" if isinstance(item, ImageContent) else "audio"
        return f"[{kind} {item.mime_type}{_size(item.data)}]"
    return f"[{getattr(item, 'type', 'unknown')} content]"


def _size(data: str) -> str:
    """`, N bytes` of base64 text's decoded size."""
    return f", {len(data) * 3 // 4 - data[-2:].count('='):,} bytes" if data else ""
