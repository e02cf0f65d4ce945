"""The tools section: the MCP servers, the limits on a call and its output, the worker's own tools.

Also what a call in flight at a crash becomes when its tool may not simply run again.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from app.config.mcp_servers import McpServerConfig, parse_mcp_servers
from app.config.section import Section


class ToolSettings(Section):
    """MCP servers, tool timeouts and output caps, the session cache, clarification, recovery."""

    title: ClassVar[str] = "Tools"

    mcp_servers: Annotated[tuple[McpServerConfig, ...], NoDecode] = Field(
        (),
        description="MCP servers: a path to a JSON file, or the JSON itself "
        '(`{"mcpServers": {...}}`, below); the demo uses its own server, '
        "`python -m app.demo.mcp_server`",
    )
    tool_timeout_seconds: float = Field(60, gt=0, description="timeout of one MCP tool call")
    max_tool_output_chars: int = Field(
        1_000_000,
        ge=100,
        description="the most of one tool output kept at all; longer output is cut, with a "
        "visible `[... output truncated: N of M characters shown]` marker",
    )
    tool_context_chars: int = Field(
        10_000,
        ge=100,
        le=1_000_000,
        description="the most of one tool output the model's context holds; the rest stays in "
        "the session tool cache, and a marker tells the model how to read on",
    )
    session_cache: bool = Field(
        True,
        description="keep every MCP tool output whole outside the prompt and offer the model "
        "`session_cache_list` / `session_cache_get`; `false`: long outputs are cut at the "
        "context cap and nothing is kept",
    )
    clarify: bool = Field(
        True,
        description="offer the model `agent_clarify` in conversations that allow it "
        '(`"clarify": false` per conversation); `false` turns it off everywhere',
    )
    in_flight_recovery: Literal["ask", "error"] = Field(
        "ask",
        description="a call that was running when its worker stopped, of a tool that says "
        "neither `readOnlyHint` nor `idempotentHint`: `ask` the user to approve running it "
        "again, or `error` (the model reads that its outcome is unknown); such a tool never "
        "runs again blindly",
    )

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _parse_mcp_servers(cls, value: Any) -> Any:
        return parse_mcp_servers(value) if isinstance(value, str) else value
