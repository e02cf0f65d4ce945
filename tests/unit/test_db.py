"""The engine factory: SQLite tuned for sharing a file, parameters kept out of logs and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.db import SQLITE_BUSY_TIMEOUT_MS, make_engine

SECRET_TEXT = "the user's private message 4f1c"


def test_sqlite_runs_in_wal_mode_with_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_a_second_connection_reads_while_the_first_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    writer, reader = make_engine(url), make_engine(url)
    with writer.begin() as connection:
        connection.execute(text("CREATE TABLE t (x INTEGER)"))
    with writer.connect() as connection:
        connection.execute(text("INSERT INTO t VALUES (1)"))
        # WAL: readers are not blocked by an open write transaction.
        with reader.connect() as other:
            assert other.execute(text("SELECT count(*) FROM t")).scalar() == 0
        connection.commit()
    writer.dispose()
    reader.dispose()


def test_bound_parameters_are_hidden_from_errors(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (x TEXT UNIQUE)"))
        connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": SECRET_TEXT})
    with pytest.raises(IntegrityError) as error, engine.begin() as connection:
        connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": SECRET_TEXT})
    assert SECRET_TEXT not in str(error.value)
    assert "hidden due to hide_parameters" in str(error.value)
    engine.dispose()
