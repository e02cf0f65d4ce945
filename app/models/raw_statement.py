"""A statement compiled once, sent as it is: for the hot paths where SQLAlchemy's per-execution
work (a connection object, events, result wrapping, the query parse) costs as much as the round
trip itself (the worker's steps, the API's hottest reads). PostgreSQL through psycopg only; the
caller holds the connection, sync or async.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import pq
from psycopg.types.json import Jsonb
from sqlalchemy import Dialect, Engine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

Row = tuple[Any, ...]


class RawStatement:
    """A Core statement compiled once for `engine`'s dialect with PostgreSQL's own placeholders
    (`$1`, `$2`, ...), executed by psycopg's raw cursors: the SQL is sent as it is, its values
    a tuple in the placeholders' order.

    With `%(name)s` placeholders psycopg parses the query on every execution to find them, and
    caches the parse only for a query of at most 4,096 bytes and 50 values: a step's statement
    (tens of values, the answer's and the claim's longer than that) was parsed afresh on every
    step. (Measured against the parse, the loop gained little: `docs/PERFORMANCE.md`.)"""

    def __init__(
        self, statement: ClauseElement, engine: Engine, json_parameters: tuple[str, ...] = ()
    ) -> None:
        compiled = statement.compile(dialect=_numbered(engine.dialect))
        assert isinstance(compiled, SQLCompiler)
        assert compiled.positiontup is not None and "POSTCOMPILE" not in compiled.string
        # A column's Python-side default is computed by SQLAlchemy at each execution, which a
        # raw statement skips: it would be sent as NULL. (`include_defaults=False` leaves it to
        # the server's default, or name the column.)
        prefetched = [
            column.key for column in (*compiled.insert_prefetch, *compiled.update_prefetch)
        ]
        assert not prefetched, f"Python-side defaults a raw statement cannot run: {prefetched}"
        self.sql = compiled.string
        self.order = tuple(compiled.positiontup)  # the name of each placeholder, $1 first
        required = {bind.key: None for bind in compiled.binds.values() if bind.required}
        # The values fixed in the statement (a status, ...); the caller supplies the rest.
        # (a value the caller leaves out is None, as before)
        self.defaults = dict(compiled.construct_params(required) or {})
        self.json_parameters = frozenset(json_parameters)

    def rows(self, connection: psycopg.Connection[Any], parameters: Mapping[str, Any]) -> list[Row]:
        """The rows the statement returns."""
        with psycopg.RawCursor(connection) as cursor:
            cursor.execute(self.sql, self._values(parameters), prepare=True)
            return cursor.fetchall() if _has_rows(cursor) else []

    async def rows_on_loop(
        self, connection: psycopg.AsyncConnection[Any], parameters: Mapping[str, Any]
    ) -> list[Row]:
        """`rows`, awaited on an event loop's connection."""
        async with psycopg.AsyncRawCursor(connection) as cursor:
            await cursor.execute(self.sql, self._values(parameters), prepare=True)
            return await cursor.fetchall() if _has_rows(cursor) else []

    def rowcount(self, connection: psycopg.Connection[Any], parameters: Mapping[str, Any]) -> int:
        """How many rows the statement changed."""
        with psycopg.RawCursor(connection) as cursor:
            cursor.execute(self.sql, self._values(parameters), prepare=True)
            return cursor.rowcount

    def _values(self, parameters: Mapping[str, Any]) -> tuple[Any, ...]:
        """The statement's values in its placeholders' order."""
        values = []
        for name in self.order:
            value = parameters[name] if name in parameters else self.defaults[name]
            if value is not None and name in self.json_parameters:
                value = Jsonb(value)
            values.append(value)
        return tuple(values)


def _has_rows(cursor: psycopg.RawCursor | psycopg.AsyncRawCursor) -> bool:
    """Whether the statement returned rows (an UPDATE without RETURNING does not). Not
    `cursor.description`: it builds a `Column` per column on every call (5 % of a read of the
    event log's 60 columns, measured)."""
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


def _numbered(dialect: Dialect) -> Dialect:
    """A dialect of `dialect`'s kind that renders PostgreSQL's numbered placeholders (a value
    used twice is one placeholder)."""
    kind: Any = type(dialect)  # (a DefaultDialect: its constructor takes the paramstyle)
    numbered: Dialect = kind(paramstyle="numeric_dollar")
    return numbered


__all__ = ["RawStatement", "Row"]
