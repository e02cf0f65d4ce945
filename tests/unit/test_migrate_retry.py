"""An upgrade that meets the running processes' locks is run again; any other failure is not."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from app import migrate
from app.errors import DatabaseUnavailable


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def _failing(sqlstates: list[str]) -> tuple[list[int], object]:
    calls: list[int] = []

    def operation() -> None:
        calls.append(1)
        if len(calls) <= len(sqlstates):
            raise OperationalError("ALTER TABLE ...", {}, _PgError(sqlstates[len(calls) - 1]))

    return calls, operation


def test_a_deadlock_or_a_lock_timeout_runs_the_upgrade_again() -> None:
    calls, operation = _failing(["40P01", "55P03"])
    waits: list[float] = []
    migrate._run(operation, sleep=waits.append)  # type: ignore[arg-type]
    assert len(calls) == 3
    assert waits == list(migrate.RETRY_WAITS_SECONDS[:2])


def test_it_gives_up_after_its_waits_with_a_clear_error() -> None:
    calls, operation = _failing(["40P01"] * 10)
    waits: list[float] = []
    with pytest.raises(DatabaseUnavailable, match="cannot migrate the database: sqlstate 40P01"):
        migrate._run(operation, sleep=waits.append)  # type: ignore[arg-type]
    assert len(calls) == len(migrate.RETRY_WAITS_SECONDS) + 1
    assert waits == list(migrate.RETRY_WAITS_SECONDS)


def test_an_unreachable_database_is_not_retried() -> None:
    calls, operation = _failing(["08006"])
    with pytest.raises(DatabaseUnavailable, match="08006"):
        migrate._run(operation, sleep=lambda _: None)  # type: ignore[arg-type]
    assert len(calls) == 1
