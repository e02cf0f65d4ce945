"""A worker frozen while it holds a lock the other workers need stops them for seconds, not for as
long as it stays frozen (SIGSTOP, a paused VM, a half-open connection nobody closes).

Found by the zombie test: the zombie was frozen inside its recovery sweep's transaction, holding
the sweep lock, so no other worker could sweep and its orphaned turn waited until the test gave
up. Now the server ends a lock holder's session once its transaction sits idle for
`Upkeep.lock_holder_idle_limit` seconds (10 by default; 1 here).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.worker.ports import ToolDefinition
from app.worker.store import Upkeep
from app.worker.store.upkeep import limit_idle, take_sweep_lock

LIMIT_S = 1.0


@pytest.fixture
def engines(database_url: str) -> Iterator[tuple[Engine, Engine]]:
    """The frozen worker's engine and a live worker's."""
    frozen, live = make_engine(database_url), make_engine(database_url)
    yield frozen, live
    frozen.dispose()
    live.dispose()


def orphan(engine: Engine, database_url: str) -> uuid.UUID:
    """A running turn whose worker went silent an hour ago."""
    client = ChatClient(load_settings(database_url=database_url), engine=engine, enqueue=print)
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hello")
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE conversations SET heartbeat_at = now() - interval '1 hour' WHERE id = :id"
            ),
            {"id": conversation_id},
        )
    return conversation_id


def assert_session_ended(connection: Connection) -> None:
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
        connection.execute(text("SELECT 1"))


@pytest.mark.raw_rows  # the orphan is left running on purpose
def test_a_worker_frozen_in_its_sweep_blocks_the_others_sweeps_only_briefly(
    engines: tuple[Engine, Engine], database_url: str
) -> None:
    frozen_engine, live_engine = engines
    conversation_id = orphan(live_engine, database_url)
    live = Upkeep(live_engine)
    with frozen_engine.connect() as frozen:
        frozen.begin()
        assert take_sweep_lock(frozen, LIMIT_S)  # ... and the process stops right here
        assert live.orphans(older_than=60) == []  # the lock is held: nobody else sweeps
        started = time.monotonic()
        found: list[tuple[uuid.UUID, int]] = []
        while not found and time.monotonic() - started < 15:
            time.sleep(0.1)
            found = live.orphans(older_than=60)
        assert [cid for cid, _ in found] == [conversation_id], "the sweep stayed blocked"
        assert_session_ended(frozen)


def test_a_worker_frozen_while_publishing_its_tools_delays_the_others_only_briefly(
    engines: tuple[Engine, Engine],
) -> None:
    frozen_engine, live_engine = engines
    tools = [ToolDefinition("add", "add numbers", {"type": "object"})]
    published = threading.Event()

    def publish() -> None:
        Upkeep(live_engine).publish_catalog(tools)
        published.set()

    with frozen_engine.connect() as frozen:
        frozen.begin()
        limit_idle(frozen, LIMIT_S)
        frozen.execute(text("LOCK TABLE tool_catalog IN SHARE ROW EXCLUSIVE MODE"))
        worker = threading.Thread(target=publish, daemon=True)
        worker.start()
        assert not published.wait(0.3)  # waits on the frozen worker's lock
        assert published.wait(15), "the publication stayed blocked"
        assert_session_ended(frozen)
