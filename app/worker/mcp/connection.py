"""One start of one MCP server (a stdio subprocess or a streamable-HTTP endpoint): the owner task
that holds its `mcp.Client` open, and the client every other task calls through.

anyio requires a client's `async with` to be entered and exited by one task, so each server has
an owner task holding its `mcp.Client` open until told to stop; any task may call through it
(one client serves hundreds of concurrent calls).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Tool

from app.config import McpServerConfig
from app.worker.mcp.results import brief

logger = logging.getLogger(__name__)

_MAX_LIST_PAGES = 100  # a server whose cursor never ends cannot hang `definitions()`
# The SDK's stdio shutdown waits at most ~6 s (stdin close, SIGTERM, SIGKILL); then we cancel.
_STOP_TIMEOUT_S = 10.0


class Unavailable(Exception):
    """A server could not be (re)started; the message says why."""


class Connection:
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
            raise Unavailable(f"did not start within {timeout:g} s")
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
                logger.debug("MCP server %r: client exit failed: %s", self.config.name, brief(exc))
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


async def list_all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def describe_target(config: McpServerConfig) -> str:
    """Where a server runs, for logs: never its env, headers or URL credentials."""
    if config.url is not None:
        parts = urlsplit(config.url)
        return f"url {parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
    return f"command {config.command!r}"
