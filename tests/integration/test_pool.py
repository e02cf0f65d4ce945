"""The pool's disconnect check: a connection the server ended is replaced before use, and a live
one costs no round trip (SQLAlchemy's pre-ping would send a SELECT 1 on every checkout)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from sqlalchemy import Engine, event, text

from app.db import make_engine
from app.testing.services import libpq_dsn
from bench.roundtrips import traced_engine


def backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_the_server_terminated_is_replaced_without_an_error(
    database_url: str,
) -> None:
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    first = backend_pid(engine)
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
        # pg_terminate_backend only signals; wait until the backend has gone (and so has said
        # so on its socket). A connection killed during the checkout itself fails its statement,
        # as it would with a pre-ping too; the store retries those.
        deadline = time.monotonic() + 30
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (first,)).fetchone():
            assert time.monotonic() < deadline, "the terminated backend never exited"
            time.sleep(0.01)
    # The pooled connection is dead now; the next checkout must notice and reconnect.
    second = backend_pid(engine)
    assert second != first
    engine.dispose()


def test_a_live_pooled_connection_is_checked_without_a_round_trip(database_url: str) -> None:
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    with traced_engine(engine) as tracer:
        backend_pid(engine)  # connects (and traces from the start)
        before = tracer.round_trips()
        for _ in range(5):
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
                connection.commit()
        # Each use: BEGIN, SELECT, COMMIT, and nothing else (no ping).
        assert tracer.round_trips() - before == 5 * 3
    engine.dispose()


def test_the_pool_hands_out_a_connection_that_is_not_mid_transaction(database_url: str) -> None:
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    states: list[Any] = []

    @event.listens_for(engine, "checkout")
    def note(dbapi_connection: Any, _record: object, _proxy: object) -> None:
        states.append(dbapi_connection.info.transaction_status)

    for _ in range(3):
        backend_pid(engine)
    assert states == [psycopg.pq.TransactionStatus.IDLE] * 3
    engine.dispose()
