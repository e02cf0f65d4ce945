"""The connections a worker's steps and the API's hottest reads use on an event loop
(`app/loop_connections.py`), on a real PostgreSQL: reused newest first, bounded, a broken or
interrupted one never reused, one loop's set closed when another loop asks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, Uuid, insert, literal, select, text

from app.db import make_engine
from app.loop_connections import LoopConnections
from app.models.raw_statement import RawStatement
from app.models.tables import messages
from app.testing import services
from app.worker import loop_bridge
from app.worker.store import TurnStore
from app.worker.store.driver import StepConflict
from app.worker.store.fence import Write


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


async def backend(connections: LoopConnections) -> int:
    async with connections.connection() as connection:
        cursor = await connection.execute("SELECT pg_backend_pid()")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


def backends_gone(engine: Engine, pid: int, timeout: float = 30) -> bool:
    """Whether the server's backend `pid` has ended (a closed connection's ends in milliseconds)."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")

    def gone() -> bool:
        with engine.connect() as check:
            return check.execute(query, {"pid": pid}).scalar_one() == 0

    return services.wait_until(gone, timeout)


def test_sequential_statements_share_one_connection_and_concurrent_ones_stay_bounded(
    engine: Engine,
) -> None:
    connections = LoopConnections(engine, size=2)
    opened: list[Any] = []
    connections.opened.append(opened.append)

    async def main() -> tuple[set[int], int]:
        sequential = {await backend(connections) for _ in range(5)}
        busy = [0]
        peak = [0]

        async def slow() -> None:
            async with connections.connection() as connection:
                busy[0] += 1
                peak[0] = max(peak[0], busy[0])
                await connection.execute("SELECT pg_sleep(0.05)")
                busy[0] -= 1

        await asyncio.gather(*(slow() for _ in range(6)))
        return sequential, peak[0]

    sequential, peak = asyncio.run(main())
    assert len(sequential) == 1
    assert peak == 2 and len(opened) == 2  # six statements waited for two connections
    assert connections.idle == 2
    connections.close()
    assert connections.idle == 0


def test_a_connection_the_server_ended_is_replaced_without_an_error(engine: Engine) -> None:
    connections = LoopConnections(engine, size=2)

    async def main() -> tuple[int, int]:
        first = await backend(connections)
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        await asyncio.sleep(0.2)  # (the goodbye reaches the idle socket)
        return first, await backend(connections)

    first, second = asyncio.run(main())
    assert first != second
    connections.close()


def test_an_interrupted_statement_s_connection_is_not_reused(engine: Engine) -> None:
    connections = LoopConnections(engine, size=2)

    async def main() -> tuple[int, int]:
        first = await backend(connections)

        async def sleeps() -> None:
            async with connections.connection() as connection:
                await connection.execute("SELECT pg_sleep(30)")

        task = asyncio.ensure_future(sleeps())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return first, await backend(connections)

    first, second = asyncio.run(main())
    # psycopg cancels the query on the server, and the pool closes that connection anyway
    assert first != second
    assert backends_gone(engine, first)
    connections.close()


def test_another_event_loop_gets_new_connections_and_the_old_ones_are_closed(
    engine: Engine,
) -> None:
    connections = LoopConnections(engine, size=2)
    first = asyncio.run(backend(connections))
    second = asyncio.run(backend(connections))  # a new loop: the first loop's one is closed
    assert first != second
    assert backends_gone(engine, first)
    assert not backends_gone(engine, second, timeout=0.1)
    connections.close()


def test_a_step_that_breaks_a_constraint_raises_step_conflict_on_the_loop_too(
    engine: Engine,
) -> None:
    """The driver's mapping of an integrity error holds on either path: a constraint the fence
    cannot see (here a unique violation forced by hand) is `StepConflict`, never a silent
    success, and the connection stays usable."""
    store = TurnStore(engine)
    driver: Any = store._driver
    statement = RawStatement(text("SELECT 1/0 WHERE CAST(:x AS int) = 1"), engine)
    driver._ops[Write.HEARTBEAT] = RawStatement(
        text("INSERT INTO alembic_version (version_num) SELECT version_num FROM alembic_version"),
        engine,
    )

    def write() -> object:
        return driver.run(Write.HEARTBEAT, {})

    async def main() -> None:
        with pytest.raises(StepConflict):
            await loop_bridge.run(write)
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with store.loop_connections.connection() as connection:  # type: ignore[union-attr]
                await statement.rows_on_loop(connection, {"x": 1})
        assert await backend(store.loop_connections) > 0  # type: ignore[arg-type]

    with pytest.raises(StepConflict):
        write()  # the same on a thread's path
    asyncio.run(main())
    store.close()


def test_the_engine_s_dispose_closes_the_idle_ones(engine: Engine) -> None:
    """A database the steps used can be dropped or cloned once its engine is disposed (as with
    the engine's own pool): nothing of the steps' connections is left on it."""
    connections = LoopConnections(engine, size=2)
    pid = asyncio.run(backend(connections))
    assert connections.idle == 1
    engine.dispose()
    assert connections.idle == 0
    assert backends_gone(engine, pid)


def test_a_raw_statement_sends_numbered_placeholders_and_its_values_in_their_order(
    engine: Engine,
) -> None:
    """`RawStatement` compiles once to `$1, $2, ...` (a value used twice is one placeholder)
    and sends the SQL unparsed through psycopg's raw cursors: psycopg parses `%(name)s` queries
    on every execution and caches the parse only up to 4,096 bytes and 50 values, which the
    claim and a step's statements pass. Values the caller leaves out are the statement's own
    (or None); a JSON parameter goes as jsonb; the sync and the async path give the same rows."""
    statement = RawStatement(
        text(
            "SELECT CAST(:a AS int) + CAST(:a AS int), CAST(:b AS text), "
            "CAST(:doc AS jsonb) ->> 'k', CAST(:gone AS text) IS NULL"
        ),
        engine,
        json_parameters=("doc",),
    )
    assert "%(" not in statement.sql and "$1" in statement.sql and "$5" not in statement.sql
    assert statement.order == ("a", "b", "doc", "gone")
    parameters = {"a": 20, "b": "x", "doc": {"k": "v"}, "unused": object()}
    with engine.connect() as connection:
        raw: Any = connection.connection.driver_connection
        raw.autocommit = True
        assert statement.rows(raw, parameters) == [(40, "x", "v", True)]
        raw.autocommit = False
    connections = LoopConnections(engine, size=1)

    async def on_loop() -> list[Any]:
        async with connections.connection() as connection:
            return await statement.rows_on_loop(connection, parameters)

    assert asyncio.run(on_loop()) == [(40, "x", "v", True)]
    connections.close()


def test_a_raw_statement_refuses_a_python_side_default(engine: Engine) -> None:
    """SQLAlchemy computes a column's Python-side default per execution, which a raw statement
    skips: it would be sent as NULL, so such a statement is refused when it is compiled."""
    source = select(literal(None, Uuid), literal(1), literal("user"))
    columns = ["conversation_id", "seq", "role"]
    with pytest.raises(AssertionError, match=r"Python-side defaults .*'is_error'"):
        RawStatement(insert(messages).from_select(columns, source), engine)
    left_to_the_server = insert(messages).from_select(columns, source, include_defaults=False)
    assert "is_error" not in RawStatement(left_to_the_server, engine).sql
