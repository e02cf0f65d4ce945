"""A worker plans its claim before the first doorbell (`TurnStore.warm`, `Driver.warm`): on real
PostgreSQL the warm-up writes nothing, and the statements it ran are kept planned, so the next
claim on that connection neither prepares nor plans them again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.worker.store import TurnStore, Upkeep
from app.worker.store.driver import WARM_RUNS

TABLES = ("conversations", "turns", "messages", "events")


@pytest.fixture
def one_connection(database_url: str) -> Iterator[Engine]:
    """An engine with a single pooled connection: every statement below runs on it."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def everything(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    with engine.connect() as connection:
        return {
            table: [tuple(row) for row in connection.execute(text(f"SELECT * FROM {table}"))]
            for table in TABLES
        }


def prepared(engine: Engine) -> dict[str, tuple[int, int]]:
    """The pooled connection's prepared statements: their text -> (generic plans, custom plans)."""
    pooled = engine.raw_connection()
    connection = pooled.driver_connection
    assert connection is not None
    try:
        connection.autocommit = True  # (a transaction rolled back would drop them: see below)
        rows = connection.execute(  # type: ignore[attr-defined]
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
    finally:
        connection.autocommit = False
        pooled.close()
    return {statement: (generic, custom) for statement, generic, custom in rows}


@pytest.mark.parametrize("owner_limited", [False, True], ids=["claim", "claim under a limit"])
def test_the_warm_up_writes_nothing_and_leaves_the_claim_planned_for_the_next_doorbell(
    engine: Engine, one_connection: Engine, database_url: str, owner_limited: bool
) -> None:
    settings = load_settings(database_url=database_url)
    client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
    waiting = client.create_conversation()
    client.submit_message(waiting, "hi")  # a running conversation nobody holds: claimable
    before = everything(engine)
    store = TurnStore(one_connection)

    store.warm(owner_limited)
    # The worker's reads between two doorbells (a sweep's, a budget's, a steer's) leave them be:
    # psycopg drops every prepared statement of a connection on a ROLLBACK, which is how
    # SQLAlchemy ends a `connect()` block; the worker's reads run in autocommit.
    Upkeep(one_connection).stale(60)
    assert store.budget_used_up(waiting) is None
    assert store.next_steer(waiting) is None

    assert everything(engine) == before  # nothing claimed, read into a lease or written
    warmed = prepared(one_connection)
    assert len(warmed) == (4 if owner_limited else 2)  # the claim's statements and the transcript
    # Each ran WARM_RUNS times: five custom plans, then the plan PostgreSQL keeps.
    assert all(custom == WARM_RUNS - 1 and generic >= 1 for generic, custom in warmed.values())

    snapshot = store.claim(waiting, "worker", 30, 5 if owner_limited else None)

    assert snapshot is not None
    after = prepared(one_connection)
    assert after.keys() == warmed.keys()  # nothing prepared again
    claimed = [s for s in after if after[s] != warmed[s]]
    assert claimed and all(after[s][1] == warmed[s][1] for s in after)  # and nothing planned again


def test_the_warm_up_on_sqlite_is_nothing(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/warm.db")
    try:
        TurnStore(engine).warm()  # (SQLite plans in microseconds: nothing to do, nothing raised)
    finally:
        engine.dispose()


def test_a_conversation_id_of_zero_is_what_the_warm_up_names() -> None:
    """The warm-up's parameters name `uuid.UUID(int=0)`, which no conversation can have: ids are
    random (version 4) UUIDs, and the nil UUID is none of them."""
    assert uuid.uuid4().version == 4 and uuid.UUID(int=0).version is None


def test_a_read_in_a_transaction_rolled_back_would_have_dropped_them(
    one_connection: Engine,
) -> None:
    """Why the worker reads in autocommit (`driver.reads`): the same read through a plain
    `connect()` block, which SQLAlchemy ends with a ROLLBACK, leaves no statement prepared."""
    TurnStore(one_connection).warm()
    assert prepared(one_connection)
    with one_connection.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert prepared(one_connection) == {}
