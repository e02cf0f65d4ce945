"""MCP servers as the worker's `ToolProvider`: one long-lived client per configured server, shared
by every conversation of the process, restarted on the next call after its server dies.

Tool-level failures never raise: unknown tool, MCP `isError`, timeout, a dead or unstartable
server all become `ToolResult(is_error=True)`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from mcp import MCPError
from mcp.types import REQUEST_TIMEOUT, RequestParamsMeta

from app.config import McpServerConfig
from app.worker.mcp.connection import Connection, Unavailable, describe_target, list_all_tools
from app.worker.mcp.names import expose_tools
from app.worker.mcp.results import (
    brief,
    capped_result,
    error_result,
    is_disconnect,
    media_of,
    render_result,
)
from app.worker.mcp.server_process import ServerProcess
from app.worker.ports import TOOL_TIMEOUT, TOOL_UNAVAILABLE, CallRef, ToolDefinition, ToolResult

logger = logging.getLogger(__name__)


# The `_meta` keys of a `tools/call` request that answers a model's call: a tool with a side
# effect can apply it once per `idempotency_key`, however often a crash makes the call run.
META_CONVERSATION_ID = "chatworker/conversation_id"
META_TOOL_CALL_ID = "chatworker/tool_call_id"
META_IDEMPOTENCY_KEY = "chatworker/idempotency_key"


def call_meta(call: CallRef | None) -> RequestParamsMeta | None:
    if call is None:
        return None
    meta = RequestParamsMeta()  # an open map: custom keys travel as they are
    meta[META_CONVERSATION_ID] = str(call.conversation_id)  # type: ignore[literal-required]
    meta[META_TOOL_CALL_ID] = call.call_id  # type: ignore[literal-required]
    meta[META_IDEMPOTENCY_KEY] = call.idempotency_key  # type: ignore[literal-required]
    return meta


class McpToolProvider:
    """Every tool of the configured MCP servers, under names unique across servers."""

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        call_timeout: float,
        connect_timeout: float = 30.0,
        max_output_chars: int = 100_000,
        max_media_bytes: int = 10_000_000,
    ) -> None:
        names = [config.name for config in servers]
        if len(set(names)) != len(names):
            raise ValueError(f"MCP server names must be unique: {names}")
        self._servers = [ServerProcess(config, asyncio.Lock()) for config in servers]
        self._by_name = {server.name: server for server in self._servers}
        self._call_timeout = call_timeout
        self._connect_timeout = connect_timeout
        self._max_output_chars = max_output_chars
        self._max_media_bytes = max_media_bytes  # an image larger is described, not kept
        self._listing = asyncio.Lock()
        self._catalog: dict[str, ToolDefinition] = {}
        self._catalog_key: tuple[int | None, ...] = ()
        self._closed = False

    async def __aenter__(self) -> McpToolProvider:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start every server and list its tools now (concurrently) instead of on first use."""
        await self.definitions()

    async def definitions(self) -> list[ToolDefinition]:
        async with self._listing:
            due = [server for server in self._servers if server.needs_listing()]
            if due and not self._closed:
                # A server that already failed is retried in the background: one stuck on start
                # must not hold every conversation's turn for `connect_timeout` at each attempt.
                for server in due:
                    if server.failures and (server.retry is None or server.retry.done()):
                        server.retry = asyncio.create_task(self._list_tools(server))
                first = [server for server in due if not server.failures]
                await asyncio.gather(*(self._list_tools(server) for server in first))
            key = tuple(server.listed_generation for server in self._servers)
            if key != self._catalog_key:
                exposed = expose_tools([(s.name, s.tools or []) for s in self._servers])
                self._catalog = {name: self._with_policy(d) for name, d in exposed.items()}
                self._catalog_key = key
            return list(self._catalog.values())

    async def execute(
        self, name: str, arguments: dict[str, Any], call: CallRef | None = None
    ) -> ToolResult:
        if self._closed:
            return error_result(
                f"Tool {name} failed: the tool provider is closed", TOOL_UNAVAILABLE
            )
        definition = await self._resolve(name)
        if definition is None:
            return error_result(f"Unknown tool: {name}", TOOL_UNAVAILABLE)
        server = self._by_name[definition.server]
        try:
            connection = await self._connect(server)
        except Unavailable as exc:
            return error_result(
                f"Tool {name} failed: the tool server '{server.name}' is unavailable ({exc})",
                TOOL_UNAVAILABLE,
            )
        # Cancelling the task awaiting this call (a cancelled turn) tells the server: mcp's
        # dispatcher sends `notifications/cancelled` for the request before the CancelledError
        # propagates (over streamable HTTP it aborts the request's POST instead), and the server
        # cancels the tool. Pinned by the "cancellation" tests of
        # tests/integration/test_mcp_provider.py.
        try:
            result = await connection.client.call_tool(
                definition.original_name,
                arguments,
                read_timeout_seconds=self._call_timeout,
                meta=call_meta(call),
            )
        except Exception as exc:
            return self._call_failed(name, connection, exc)
        text = render_result(name, result)
        found = capped_result(text, result.is_error, self._max_output_chars)
        media = media_of(result, self._max_media_bytes)
        return replace(found, media=media) if media else found

    async def close(self) -> None:
        """Stop every server (its owner task exits the client, which ends the subprocess)."""
        self._closed = True
        retries = [s.retry for s in self._servers if s.retry is not None and not s.retry.done()]
        for retry in retries:
            retry.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
        await asyncio.gather(*(self._disconnect(server) for server in self._servers))

    # --- internals ------------------------------------------------------------------------------

    def _with_policy(self, definition: ToolDefinition) -> ToolDefinition:
        """Whether the user approves each call first, by its server's policy (`approval`)."""
        policy = self._by_name[definition.server].config.approval_of(definition.original_name)
        requires = policy == "always" or (policy == "destructive" and definition.is_destructive)
        return replace(definition, requires_approval=requires)

    async def _resolve(self, name: str) -> ToolDefinition | None:
        """Look a name up; a server not listed yet (a resumed turn, a late start) is tried first."""
        if name not in self._catalog:
            await self.definitions()
        return self._catalog.get(name)

    async def _connect(self, server: ServerProcess) -> Connection:
        """The server's live connection, (re)started once however many callers need it."""
        current = server.connection
        if current is not None and not current.dead:
            return current
        async with server.lock:
            current = server.connection
            if current is not None and not current.dead:
                return current
            if self._closed:
                raise Unavailable("the tool provider is closed")
            if current is not None:
                server.connection = None
                await current.close()
            if server.waiting():
                wait = server.retry_at - time.monotonic()
                raise Unavailable(f"{server.last_error}; next start attempt in {wait:.1f} s")
            server.connection = await self._start(server)
            return server.connection

    async def _start(self, server: ServerProcess) -> Connection:
        connection = Connection(server.config, self._call_timeout)
        started = time.monotonic()
        try:
            await connection.open(self._connect_timeout)
        except Exception as exc:
            error = brief(exc)
            delay = server.note_failure(error)
            logger.warning(
                "MCP server %r (%s) failed to start, next attempt in %g s: %s",
                server.name,
                describe_target(server.config),
                delay,
                error,
            )
            raise Unavailable(error) from exc
        server.failures = 0
        logger.info(
            "MCP server %r started in %.2f s (start #%d)",
            server.name,
            time.monotonic() - started,
            connection.generation,
        )
        return connection

    async def _disconnect(self, server: ServerProcess) -> None:
        async with server.lock:
            connection, server.connection = server.connection, None
            if connection is not None:
                await connection.close()

    async def _list_tools(self, server: ServerProcess) -> None:
        try:
            connection = await self._connect(server)
        except Unavailable:
            return  # logged by `_start`; the server contributes no tools until it starts
        try:
            server.tools = await list_all_tools(connection.client)
            server.listed_generation = connection.generation
            server.failures = 0
        except Exception as exc:
            if is_disconnect(exc) or connection.dead:
                connection.mark_dead()
            delay = server.note_failure(brief(exc))
            logger.warning(
                "MCP server %r: tools/list failed, next attempt in %g s: %s",
                server.name,
                delay,
                brief(exc),
            )

    def _call_failed(self, name: str, connection: Connection, exc: Exception) -> ToolResult:
        server = connection.config.name
        # A bare TimeoutError is a transport's own bounded send giving up: a timeout too.
        timed_out = isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT
        if timed_out or isinstance(exc, TimeoutError):
            logger.warning("MCP tool %r on %r timed out", name, server)
            return error_result(
                f"Tool {name} timed out after {self._call_timeout:g} s", TOOL_TIMEOUT
            )
        if is_disconnect(exc) or connection.dead:
            connection.mark_dead()
            logger.warning("MCP server %r stopped during %r: %s", server, name, brief(exc))
            detail = exc.message if isinstance(exc, MCPError) else brief(exc)
            return error_result(
                f"Tool {name} failed: the tool server '{server}' stopped ({detail})",
                TOOL_UNAVAILABLE,
            )
        logger.warning("MCP tool %r on %r raised %s", name, server, brief(exc))
        return error_result(f"Tool {name} failed: {brief(exc)}")
