"""The connections an event loop awaits its statements on (a worker's steps with
`CHATWORKER_DATABASE_IO=async`, the API's hot routes): psycopg's `AsyncConnection`, in
autocommit, kept and reused newest first (so the few that run the steps keep their prepared
statements and plans), at most `size` open; those of one event loop only (a connection belongs to
the loop it was opened on: another loop's are closed when a new one asks).

A connection goes back only as it came: open, idle, not inside a transaction. One that broke,
or whose statement was interrupted (the task cancelled), is closed; the next ask opens another.
An idle one whose server went away (a restart, `pg_terminate_backend`, an idle timeout: its
socket turns readable) is found at checkout, without a round trip (`app.db.usable`, the check
the engine's pool makes), and replaced. The engine's
`dispose()` closes the idle ones too, as it closes its own pool's.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
from sqlalchemy import Engine, event

from app.db import at_rest, usable

Connection = psycopg.AsyncConnection[Any]


class LoopConnections:
    """At most `size` open connections to `engine`'s database, for one event loop at a time."""

    def __init__(self, engine: Engine, size: int) -> None:
        arguments, options = engine.dialect.create_connect_args(engine.url)
        self._arguments = tuple(arguments)
        # (with the dialect's adapters: the values come back as the engine's own would)
        self._options = {**options, "autocommit": True}
        self._size = size
        self._idle: list[Connection] = []
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._freed: asyncio.Condition | None = None
        # called with each connection opened (the benchmark traces its protocol)
        self.opened: list[Callable[[Connection], None]] = []
        # Dropped with idle connections, it closes them, silently; so does the engine's dispose.
        weakref.finalize(self, _finish, self._idle)
        event.listen(engine, "engine_disposed", _closer(weakref.ref(self)))

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection for one statement, given back after it (or closed: see the module)."""
        freed = self._on_this_loop()
        connection = await self._take(freed)
        try:
            yield connection
        except psycopg.Error:  # the statement's own error (a constraint...): the server said so
            await self._give_back(connection, freed)
            raise
        except BaseException:  # interrupted (a cancel): whatever psycopg made of it, not reused
            connection.pgconn.finish()
            await self._give_back(connection, freed)
            raise
        await self._give_back(connection, freed)

    def close(self) -> None:
        """Close the idle connections (from any thread; call it once the loop is done with
        them). A later ask opens new ones."""
        _finish(self._idle)
        self._loop = self._freed = None

    @property
    def idle(self) -> int:
        return len(self._idle)

    def _on_this_loop(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._freed is None:
            _finish(self._idle)  # (another loop's: unusable here)
            self._loop, self._freed, self._open = loop, asyncio.Condition(), 0
        return self._freed

    async def _take(self, freed: asyncio.Condition) -> Connection:
        while True:
            while self._idle:
                connection = self._idle.pop()
                if usable(connection):
                    return connection
                connection.pgconn.finish()
                self._open -= 1
            if self._open < self._size:
                self._open += 1
                try:
                    connection = await psycopg.AsyncConnection.connect(
                        *self._arguments, **self._options
                    )
                except BaseException:
                    self._open -= 1
                    raise
                for opened in self.opened:
                    opened(connection)
                return connection
            async with freed:
                await freed.wait()

    async def _give_back(self, connection: Connection, freed: asyncio.Condition) -> None:
        if freed is not self._freed:  # taken before another loop asked: not counted any more
            connection.pgconn.finish()
            return
        if self._open <= self._size and at_rest(connection):
            self._idle.append(connection)
        else:
            connection.pgconn.finish()
            self._open -= 1
        async with freed:
            freed.notify()


def _closer(connections: weakref.ref[LoopConnections]) -> Callable[[Engine], None]:
    def close(_engine: Engine) -> None:
        alive = connections()
        if alive is not None:
            alive.close()

    return close


def _finish(connections: list[Connection]) -> None:
    while connections:
        connections.pop().pgconn.finish()


__all__ = ["LoopConnections"]
