"""Which errors are a database outage (the connection's fault, never the turn's): a run they stop
gives its claim back and costs the turn no attempt; every other error is the turn's to answer for
(`app/worker/store/outage.py`)."""

from __future__ import annotations

import pytest
from psycopg import OperationalError as DriverOperationalError
from psycopg import errors
from sqlalchemy import exc

from app.errors import DatabaseUnavailable
from app.worker.store.outage import interrupted_by_database


def raised_from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


OUTAGES = [
    DriverOperationalError("connection failed: Connection refused"),  # (no SQLSTATE)
    DriverOperationalError("server closed the connection unexpectedly"),
    errors.AdminShutdown("terminating connection due to administrator command"),
    errors.CrashShutdown("terminating connection because of crash of another server process"),
    errors.CannotConnectNow("the database system is starting up"),
    errors.IdleSessionTimeout("terminating connection due to idle-session timeout"),
    errors.ConnectionFailure("connection failure"),
    errors.TooManyConnections("sorry, too many clients already"),
    errors.InterfaceError("the connection is closed"),
    exc.OperationalError("UPDATE ...", {}, DriverOperationalError("SSL SYSCALL error: EOF")),
    exc.DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True),
    exc.TimeoutError("QueuePool limit of size 8 overflow 2 reached"),
    exc.DisconnectionError("connection is closed, in a bad state, or ended by the server"),
    DatabaseUnavailable("the database did not answer"),
    raised_from(RuntimeError("step failed"), errors.AdminShutdown("terminating connection")),
]

NOT_OUTAGES = [
    errors.QueryCanceled("canceling statement due to statement timeout"),
    errors.DeadlockDetected("deadlock detected"),
    errors.UniqueViolation("duplicate key value violates unique constraint"),
    exc.IntegrityError("INSERT ...", {}, errors.UniqueViolation("duplicate key")),
    exc.DBAPIError("SELECT 1", {}, Exception("bad"), connection_invalidated=False),
    ValueError("a bug"),
    RuntimeError("a tool killed nothing"),
]


@pytest.mark.parametrize("error", OUTAGES, ids=lambda e: f"{type(e).__name__}: {e}"[:60])
def test_a_connection_that_failed_is_an_outage(error: BaseException) -> None:
    assert interrupted_by_database(error)


@pytest.mark.parametrize("error", NOT_OUTAGES, ids=lambda e: f"{type(e).__name__}: {e}"[:60])
def test_every_other_error_is_the_turn_s_own(error: BaseException) -> None:
    assert not interrupted_by_database(error)


def test_a_cycle_of_causes_ends_the_walk() -> None:
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert not interrupted_by_database(first)
