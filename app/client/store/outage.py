"""The client's engine speaks of an outage in the project's own words: every error that says the
database did not answer is `DatabaseUnavailable` (raised from the driver's error), so a caller
(the API's problems and its streams) needs no SQLAlchemy to tell it apart.

    error (a statement, a connect, a commit)         raised as
    -----------------------------------------------  -----------------------------------------
    the driver's OperationalError, InterfaceError    DatabaseUnavailable (the connection is
      (a server gone, refusing, restarting, a          invalidated as before when it broke)
      timeout), or a disconnect SQLAlchemy detects
    the pool's timeout (no connection free in time)  DatabaseUnavailable
    anything else (a constraint, a bug)              as it was

Only the client's own uses change (`unavailable_as_ours` gives an engine of its own over the same
pool): another user of the engine it was given, a worker sharing it in one process, still sees
SQLAlchemy's errors.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event, exc
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.engine.base import OptionEngine
from sqlalchemy.pool import PoolProxiedConnection

from app.errors import DatabaseUnavailable


def unavailable_as_ours(engine: Engine) -> Engine:
    """`engine` for the client: the same pool, its outages raised as `DatabaseUnavailable`."""
    if isinstance(engine, _Ours):
        return engine
    if not event.contains(engine, "handle_error", _translate):
        event.listen(engine, "handle_error", _translate)
    return _Ours(engine, {})


class _Ours(OptionEngine):
    """An engine over another's pool whose connections' outages are ours (`_translate`), and
    whose pool's timeout is too; so are the engines made from it (`execution_options`)."""

    def raw_connection(self) -> PoolProxiedConnection:
        try:
            return super().raw_connection()
        except exc.TimeoutError as error:
            raise DatabaseUnavailable(
                f"no database connection was free in time: {error}"
            ) from error


_Ours._option_cls = _Ours


def _translate(context: ExceptionContext) -> None:
    """An error of one of the client's connections (`_Ours`) that says the database did not
    answer, raised as `DatabaseUnavailable`; SQLAlchemy still invalidates a broken connection."""
    if not isinstance(context.engine, _Ours):
        return
    original: Any = context.original_exception
    dbapi = context.dialect.loaded_dbapi
    if context.is_disconnect or isinstance(
        original, (dbapi.OperationalError, dbapi.InterfaceError)
    ):
        raise DatabaseUnavailable(f"the database did not answer: {original}")
