"""Engine and session factory built from the settings.

Bound parameters never reach the logs (they carry user text); SQLite runs in WAL mode with a busy
timeout so a worker thread and the CLI can share one file.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

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
    return create_engine(url, pool_pre_ping=True, hide_parameters=True, **options)


def _tune_sqlite(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded objects readable after commit (the worker reads what it wrote)."""
    return sessionmaker(engine, expire_on_commit=False)
