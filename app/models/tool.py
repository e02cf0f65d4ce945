"""The tool catalogue: every tool the workers' MCP servers offer, as the workers last saw it.

Workers publish it when they start; the web-app client checks a conversation's tool names
against it without starting any MCP server itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, String, Text
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JsonType

#: The worker's own tools, never sent to an MCP server (`app.worker.builtin`): the model asks the
#: user a question; it pages through earlier tool outputs. No client tool may take these names.
CLARIFY_TOOL = "agent_clarify"
#: The session tool cache's readers (`tool_outputs`): the worker runs them itself.
SESSION_CACHE_LIST = "session_cache_list"
SESSION_CACHE_GET = "session_cache_get"
BUILTIN_TOOL_NAMES = frozenset({CLARIFY_TOOL, SESSION_CACHE_LIST, SESSION_CACHE_GET})


class CatalogTool(Base):
    __tablename__ = "tool_catalog"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    server: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    input_schema: Mapped[dict[str, Any]] = mapped_column(JsonType)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
