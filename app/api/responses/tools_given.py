"""A create request's `tools`: `function` tools (the client executes them) and `mcp` tools (a
worker's MCP server by `server_label`, optionally `allowed_tools` and `require_approval`), or
refused naming the tool. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.api.responses.errors import Unsupported


@dataclass(frozen=True)
class McpTool:
    server_label: str
    allowed_tools: tuple[str, ...] | None  # None: all of the server's tools
    approve_all: bool = False  # require_approval "always": every call of its tools asks
    approve: tuple[str, ...] = ()  # require_approval {"always": {"tool_names"}}: these ask


def read_tools(value: Any) -> tuple[tuple[dict[str, Any], ...], tuple[McpTool, ...]]:
    if value is None:
        return (), ()
    if not isinstance(value, list):
        raise Unsupported("tools must be a list", param="tools")
    functions: list[dict[str, Any]] = []
    servers: list[McpTool] = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            name = tool.get("name")
            if not isinstance(name, str):
                raise Unsupported(f"{where}.name must be a string", param=where)
            parameters = tool.get("parameters") or {"type": "object", "properties": {}}
            functions.append(
                {
                    "name": name,
                    "description": tool.get("description") or "",
                    "parameters": parameters,
                }
            )
        elif kind == "mcp":
            servers.append(_mcp(tool, where))
        else:
            raise Unsupported(
                f"{where} is of type {kind!r}: this server takes function and mcp tools",
                param=where,
            )
    return tuple(functions), tuple(servers)


def _mcp(tool: dict[str, Any], where: str) -> McpTool:
    for name in ("server_url", "connector_id", "headers", "authorization"):
        if tool.get(name) is not None:
            raise Unsupported(
                f"{where}.{name}: a worker connects only to the MCP servers it is configured "
                "with; name one by server_label",
                param=where,
            )
    approve_all, approve = _require_approval(tool.get("require_approval"), where)
    label = tool.get("server_label")
    if not isinstance(label, str) or not label:
        raise Unsupported(f"{where}.server_label must be a string", param=where)
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):
        allowed = allowed.get("tool_names")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed)
    ):
        raise Unsupported(f"{where}.allowed_tools must be a list of names", param=where)
    return McpTool(label, None if allowed is None else tuple(allowed), approve_all, approve)


def _require_approval(value: Any, where: str) -> tuple[bool, tuple[str, ...]]:
    """(every tool asks, the tools that ask): "always", or {"always": {"tool_names": [...]}}
    ask; "never" (or a tool under "never") follows the server's own policy: a caller can ask
    for more approvals than the operator's, never for fewer."""
    if value is None or value == "never":
        return False, ()
    if value == "always":
        return True, ()
    if isinstance(value, dict) and set(value) <= {"always", "never"}:
        names: list[str] = []
        for key in ("always", "never"):
            part = value.get(key)
            if part is None:
                continue
            listed = part.get("tool_names") if isinstance(part, dict) else None
            if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
                raise Unsupported(
                    f'{where}.require_approval.{key} must be {{"tool_names": [...]}}',
                    param=where,
                )
            if key == "always":
                names = listed
        return False, tuple(names)
    raise Unsupported(
        f'{where}.require_approval must be "always", "never" or '
        '{"always": {"tool_names": [...]}, "never": {...}}',
        param=where,
    )


__all__ = ["McpTool", "read_tools"]
