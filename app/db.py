"""The SQLAlchemy engine built from a database URL.

Bound parameters never reach the logs (they carry user text); SQLite runs in WAL mode with a busy
timeout so a worker thread and the CLI can share one file. A pooled PostgreSQL connection is checked
before each use without a round trip (see `_check_alive`).
"""

from __future__ import annotations

import contextlib
import select
import sqlite3
from collections.abc import Iterator
from typing import Any

from psycopg import pq
from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import DisconnectionError

SQLITE_BUSY_TIMEOUT_MS = 10_000


def make_engine(url: str, **options: Any) -> Engine:
    """An engine for `url`: pre-pinged pool, hidden parameters, SQLite tuned for sharing."""
    if url.startswith("sqlite"):
        options.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        engine = create_engine(url, hide_parameters=True, **options)
        event.listen(engine, "connect", _tune_sqlite)
        return engine
    options.setdefault("pool_size", 5)
    options.setdefault("max_overflow", 5)
    psycopg3 = make_url(url).get_driver_name() == "psycopg"
    # Another driver gets SQLAlchemy's pre-ping: one SELECT 1 round trip per checkout.
    engine = create_engine(url, pool_pre_ping=not psycopg3, hide_parameters=True, **options)
    if psycopg3:
        event.listen(engine, "checkout", _check_alive)
    return engine


def psycopg_driven(engine: Engine) -> bool:
    """PostgreSQL through psycopg 3: the database whose statements the worker's steps and the
    API's hot routes send themselves (`RawStatement`, `LoopConnections`)."""
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"


def autocommit_reads(engine: Engine) -> Engine:
    """`engine` for reads, in autocommit: no transaction to roll back. psycopg forgets every
    statement it prepared on a connection (and has the server deallocate them: a round trip) when
    a transaction on it rolls back, and SQLAlchemy rolls back each `connect()` block it closes: a
    read in one cost the next statements on that connection their prepared plans, and a read of
    the event log a ROLLBACK and a re-preparation apiece. Under READ COMMITTED, PostgreSQL's
    default, each statement takes its own snapshot either way: autocommit changes nothing a
    read sees."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


@contextlib.contextmanager
def one_snapshot(engine: Engine) -> Iterator[Connection]:
    """A transaction whose statements all see the database as of one moment, for reads that
    must agree with each other (a turn's status and its events). Under READ COMMITTED,
    PostgreSQL's default, each statement takes a snapshot of its own: REPEATABLE READ takes one
    at the first; SQLite's driver begins a transaction only before a write: BEGIN."""
    dialect = engine.dialect.name
    if dialect == "postgresql":
        engine = engine.execution_options(isolation_level="REPEATABLE READ")
    with engine.connect() as connection, connection.begin():
        if dialect == "sqlite":
            connection.exec_driver_sql("BEGIN")
        yield connection


def shown(url: str) -> str:
    """A database URL fit to print: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def _check_alive(dbapi_connection: Any, _record: object, _proxy: object) -> None:
    """A pessimistic disconnect check that costs no round trip (a SELECT 1 costs one per step).

    An idle connection has nothing to read. When the server ends a session (restart,
    pg_terminate_backend, idle timeout) it sends an error and closes the socket, so the socket turns
    readable; raising `DisconnectionError` makes the pool replace the connection and try again.
    """
    if not usable(dbapi_connection):
        raise DisconnectionError("connection is closed, in a bad state, or ended by the server")


def at_rest(connection: Any) -> bool:
    """A psycopg connection (sync or async) open and idle outside any transaction."""
    pgconn = connection.pgconn
    return bool(
        not connection.closed
        and pgconn.status == pq.ConnStatus.OK
        and pgconn.transaction_status == pq.TransactionStatus.IDLE
    )


def usable(connection: Any) -> bool:
    """`at_rest`, and nothing unread on its socket: no round trip (see `_check_alive`)."""
    if not at_rest(connection):
        return False
    poller = select.poll()
    poller.register(connection.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return not poller.poll(0)


def _tune_sqlite(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()
