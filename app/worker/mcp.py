"""MCP servers as the worker's `ToolProvider`: one long-lived client per configured server, shared
by every conversation of the process, restarted on the next call after its server dies.

anyio requires a client's `async with` to be entered and exited by one task, so each server has
an owner task holding its `mcp.Client` open until told to stop; any task may call through it
(one client serves hundreds of concurrent calls). Tool-level failures never raise: unknown tool,
MCP `isError`, timeout, a dead or unstartable server all become `ToolResult(is_error=True)`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import anyio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from app.config import McpServerConfig
from app.worker.ports import ToolDefinition, ToolResult

logger = logging.getLogger(__name__)

MAX_NAME_LENGTH = 64
_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LIST_PAGES = 100  # a server whose cursor never ends cannot hang `definitions()`
# A server that fails to start (or to list) is retried after 1 s, 2 s, 4 s ... at most 60 s.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
# The SDK's stdio shutdown waits at most ~6 s (stdin close, SIGTERM, SIGKILL); then we cancel.
_STOP_TIMEOUT_S = 10.0


class _Unavailable(Exception):
    """A server could not be (re)started; the message says why."""


# --- one running server -------------------------------------------------------------------------


class _Connection:
    """One start of one server: the owner task and the client every other task calls through."""

    _generations = itertools.count(1)

    def __init__(self, config: McpServerConfig, read_timeout: float) -> None:
        self.config = config
        self.generation = next(self._generations)
        self.dead = False
        self._read_timeout = read_timeout
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    @property
    def client(self) -> Client:
        return self._ready.result()

    async def open(self, timeout: float) -> None:
        """Start the owner task and wait until the server has answered the handshake."""
        self._task = asyncio.create_task(self._own(), name=f"mcp-server:{self.config.name}")
        try:
            await asyncio.wait({self._ready}, timeout=timeout)
        except BaseException:  # the caller was cancelled: leave no process behind
            await self.close()
            raise
        if not self._ready.done() or self._ready.cancelled():
            await self.close()
            raise _Unavailable(f"did not start within {timeout:g} s")
        error = self._ready.exception()
        if error is not None:
            await self.close()
            raise error

    def mark_dead(self) -> None:
        """The server stopped answering: let the owner task release it now, in the background."""
        self.dead = True
        self._stop.set()

    async def close(self) -> None:
        self.dead = True
        self._stop.set()
        task = self._task
        if task is None:
            return
        if not self._ready.done():  # still starting: nothing to exit gracefully
            task.cancel()
        _, pending = await asyncio.wait({task}, timeout=_STOP_TIMEOUT_S)
        if pending:
            logger.warning("MCP server %r did not stop in time; cancelling", self.config.name)
            task.cancel()
            await asyncio.wait({task}, timeout=_STOP_TIMEOUT_S)
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: no "exception was never retrieved" noise

    async def _own(self) -> None:
        try:
            async with _open_client(self.config, self._read_timeout) as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                logger.debug("MCP server %r: client exit failed: %s", self.config.name, _brief(exc))
        finally:
            self.dead = True
            if not self._ready.done():
                self._ready.cancel()


@asynccontextmanager
async def _open_client(config: McpServerConfig, read_timeout: float) -> AsyncIterator[Client]:
    if config.url is not None:
        # `Client(url)` cannot carry headers; the SDK's own HTTP client factory keeps its
        # stream-friendly timeouts (300 s read; each request is bounded by `read_timeout`).
        async with create_mcp_http_client(headers=dict(config.headers)) as http:
            transport = streamable_http_client(config.url, http_client=http)
            async with Client(transport, read_timeout_seconds=read_timeout) as client:
                yield client
    else:
        async with Client(stdio_parameters(config), read_timeout_seconds=read_timeout) as client:
            yield client


def stdio_parameters(config: McpServerConfig) -> StdioServerParameters:
    """Spawn exactly what the config says: its env (plus PATH), never the worker's secrets.

    The SDK adds HOME, LOGNAME, PATH, SHELL, TERM and USER by itself.
    """
    assert config.command is not None
    env = dict(config.env)
    env.setdefault("PATH", os.environ.get("PATH", os.defpath))
    return StdioServerParameters(
        command=config.command,
        args=list(config.args),
        env=env,
        cwd=config.cwd,
        # Bytes that are not UTF-8 become U+FFFD instead of failing the whole line. (Lone
        # surrogate escapes never get here: the SDK's JSON parser drops such a message.)
        encoding_error_handler="replace",
    )


@dataclass
class _Server:
    """A configured server across its restarts, and its start back-off."""

    config: McpServerConfig
    lock: asyncio.Lock
    connection: _Connection | None = None
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


# --- the provider -------------------------------------------------------------------------------


class McpToolProvider:
    """Every tool of the configured MCP servers, under names unique across servers."""

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        call_timeout: float,
        connect_timeout: float = 30.0,
        max_output_chars: int = 100_000,
    ) -> None:
        names = [config.name for config in servers]
        if len(set(names)) != len(names):
            raise ValueError(f"MCP server names must be unique: {names}")
        self._servers = [_Server(config, asyncio.Lock()) for config in servers]
        self._by_name = {server.name: server for server in self._servers}
        self._call_timeout = call_timeout
        self._connect_timeout = connect_timeout
        self._max_output_chars = max_output_chars
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
                self._catalog = expose_tools([(s.name, s.tools or []) for s in self._servers])
                self._catalog_key = key
            return list(self._catalog.values())

    async def execute(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self._closed:
            return _error(f"Tool {name} failed: the tool provider is closed")
        definition = await self._resolve(name)
        if definition is None:
            return _error(f"Unknown tool: {name}")
        server = self._by_name[definition.server]
        try:
            connection = await self._connect(server)
        except _Unavailable as exc:
            return _error(
                f"Tool {name} failed: the tool server '{server.name}' is unavailable ({exc})"
            )
        try:
            result = await connection.client.call_tool(
                definition.original_name, arguments, read_timeout_seconds=self._call_timeout
            )
        except Exception as exc:
            return self._call_failed(name, connection, exc)
        return self._result(_render(name, result), result.is_error)

    async def close(self) -> None:
        """Stop every server (its owner task exits the client, which ends the subprocess)."""
        self._closed = True
        retries = [s.retry for s in self._servers if s.retry is not None and not s.retry.done()]
        for retry in retries:
            retry.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
        await asyncio.gather(*(self._disconnect(server) for server in self._servers))

    # --- internals ------------------------------------------------------------------------------

    async def _resolve(self, name: str) -> ToolDefinition | None:
        """Look a name up; a server not listed yet (a resumed turn, a late start) is tried first."""
        if name not in self._catalog:
            await self.definitions()
        return self._catalog.get(name)

    async def _connect(self, server: _Server) -> _Connection:
        """The server's live connection, (re)started once however many callers need it."""
        current = server.connection
        if current is not None and not current.dead:
            return current
        async with server.lock:
            current = server.connection
            if current is not None and not current.dead:
                return current
            if self._closed:
                raise _Unavailable("the tool provider is closed")
            if current is not None:
                server.connection = None
                await current.close()
            if server.waiting():
                wait = server.retry_at - time.monotonic()
                raise _Unavailable(f"{server.last_error}; next start attempt in {wait:.1f} s")
            server.connection = await self._start(server)
            return server.connection

    async def _start(self, server: _Server) -> _Connection:
        connection = _Connection(server.config, self._call_timeout)
        started = time.monotonic()
        try:
            await connection.open(self._connect_timeout)
        except Exception as exc:
            error = _brief(exc)
            delay = server.note_failure(error)
            logger.warning(
                "MCP server %r (%s) failed to start, next attempt in %g s: %s",
                server.name,
                _describe_target(server.config),
                delay,
                error,
            )
            raise _Unavailable(error) from exc
        server.failures = 0
        logger.info(
            "MCP server %r started in %.2f s (start #%d)",
            server.name,
            time.monotonic() - started,
            connection.generation,
        )
        return connection

    async def _disconnect(self, server: _Server) -> None:
        async with server.lock:
            connection, server.connection = server.connection, None
            if connection is not None:
                await connection.close()

    async def _list_tools(self, server: _Server) -> None:
        try:
            connection = await self._connect(server)
        except _Unavailable:
            return  # logged by `_start`; the server contributes no tools until it starts
        try:
            server.tools = await _list_all_tools(connection.client)
            server.listed_generation = connection.generation
            server.failures = 0
        except Exception as exc:
            if _is_disconnect(exc) or connection.dead:
                connection.mark_dead()
            delay = server.note_failure(_brief(exc))
            logger.warning(
                "MCP server %r: tools/list failed, next attempt in %g s: %s",
                server.name,
                delay,
                _brief(exc),
            )

    def _call_failed(self, name: str, connection: _Connection, exc: Exception) -> ToolResult:
        server = connection.config.name
        # A bare TimeoutError is a transport's own bounded send giving up: a timeout too.
        timed_out = isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT
        if timed_out or isinstance(exc, TimeoutError):
            logger.warning("MCP tool %r on %r timed out", name, server)
            return _error(f"Tool {name} timed out after {self._call_timeout:g} s")
        if _is_disconnect(exc) or connection.dead:
            connection.mark_dead()
            logger.warning("MCP server %r stopped during %r: %s", server, name, _brief(exc))
            detail = exc.message if isinstance(exc, MCPError) else _brief(exc)
            return _error(f"Tool {name} failed: the tool server '{server}' stopped ({detail})")
        logger.warning("MCP tool %r on %r raised %s", name, server, _brief(exc))
        return _error(f"Tool {name} failed: {_brief(exc)}")

    def _result(self, text: str, is_error: bool) -> ToolResult:
        limit = self._max_output_chars
        if len(text) > limit:
            marker = f"\n[... output truncated: {limit} of {len(text)} characters shown]"
            text = text[:limit] + marker
        return ToolResult(content=text, is_error=is_error)


# --- pure helpers -------------------------------------------------------------------------------


def expose_tools(listings: Sequence[tuple[str, Sequence[Tool]]]) -> dict[str, ToolDefinition]:
    """Name every tool uniquely: a name offered by one server stays, a shared one becomes
    `<server>__<tool>`; anything outside `^[a-zA-Z0-9_-]{1,64}$` is sanitized, then de-duplicated.
    """
    owners = Counter(name for _, tools in listings for name in {tool.name for tool in tools})
    wanted = [
        (server, tool, tool.name if owners[tool.name] == 1 else f"{server}__{tool.name}")
        for server, tools in listings
        for tool in tools
    ]
    chosen: list[str | None] = [None] * len(wanted)
    taken: set[str] = set()
    # Valid names first, so a sanitized name can never take the place of one that needed nothing.
    for index, (_, _, name) in enumerate(wanted):
        if _VALID_NAME.match(name) and name not in taken:
            chosen[index] = name
            taken.add(name)
    for index, (_, _, name) in enumerate(wanted):
        if chosen[index] is None:
            chosen[index] = _unique(_sanitize(name), taken)
            taken.add(chosen[index] or "")
    catalog: dict[str, ToolDefinition] = {}
    for (server, tool, _), exposed in zip(wanted, chosen, strict=True):
        assert exposed is not None
        catalog[exposed] = ToolDefinition(
            name=exposed,
            description=tool.description or tool.title or "",
            input_schema=dict(tool.input_schema),
            server=server,
            original_name=tool.name,
        )
    return catalog


def _sanitize(name: str) -> str:
    return _INVALID_NAME_CHARS.sub("_", name)[:MAX_NAME_LENGTH] or "tool"


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    for number in itertools.count(2):
        suffix = f"_{number}"
        candidate = name[: MAX_NAME_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover


async def _list_all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _render(name: str, result: CallToolResult) -> str:
    text = "\n".join(_describe_content(item) for item in result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if not text:
        text = f"Tool {name} failed without a message" if result.is_error else "(no output)"
    return text


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


def _is_disconnect(exc: BaseException) -> bool:
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


def _brief(exc: BaseException) -> str:
    """`Type: message` of the innermost cause of a one-exception group chain."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = exc.message if isinstance(exc, MCPError) else str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _describe_target(config: McpServerConfig) -> str:
    """Where a server runs, for logs: never its env, headers or URL credentials."""
    if config.url is not None:
        parts = urlsplit(config.url)
        return f"url {parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
    return f"command {config.command!r}"


def _error(message: str) -> ToolResult:
    return ToolResult(content=message, is_error=True)
