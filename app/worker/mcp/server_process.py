"""A configured MCP server across its restarts: its live connection, its last tool listing and
its start back-off.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from mcp.types import Tool

from app.config import McpServerConfig
from app.worker.mcp.connection import Connection

# A server that fails to start (or to list) is retried after 1 s, 2 s, 4 s ... at most 60 s.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0


@dataclass
class ServerProcess:
    """A configured server across its restarts, and its start back-off."""

    config: McpServerConfig
    lock: asyncio.Lock
    connection: Connection | None = None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    retry: asyncio.Task[None] | None = None
    # The last listing, kept while the server is down so names stay stable across restarts.
    tools: list[Tool] | None = None
    listed_generation: int | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def waiting(self) -> bool:
        return time.monotonic() < self.retry_at

    def needs_listing(self) -> bool:
        """Never listed, or restarted since (its tools may have changed), and not backing off."""
        if self.waiting():
            return False
        if self.tools is None:
            return True
        live = self.connection
        return live is not None and not live.dead and live.generation != self.listed_generation

    def note_failure(self, error: str) -> float:
        self.failures += 1
        self.last_error = error
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2.0 ** (self.failures - 1))
        self.retry_at = time.monotonic() + delay
        return delay
