"""The tool catalogue as workers publish it: several workers booting at once must all start.

Every worker replaces the catalogue with its servers' tools when it starts. Workers of one
deployment start together (a rollout, a supervisor restarting them all), so the publications
overlap; before the fix, one of them failed with a duplicate key and its engine never started.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select

from app.db import make_engine
from app.models import CatalogTool
from app.worker.ports import ToolDefinition
from app.worker.store import Upkeep

WORKERS = 6
ROUNDS = 15


@pytest.fixture
def engine(any_database_url: str) -> Iterator[Engine]:
    engine = make_engine(any_database_url, pool_size=WORKERS, max_overflow=0)
    yield engine
    engine.dispose()


def tools(*names: str) -> list[ToolDefinition]:
    return [ToolDefinition(n, f"{n} tool", {"type": "object"}, "srv", n) for n in names]


def names(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.execute(select(CatalogTool.name).order_by(CatalogTool.name)))


def test_workers_publishing_at_the_same_moment_all_succeed(engine: Engine) -> None:
    definitions = tools("add", "search_docs", "write_note")
    errors: list[BaseException] = []

    def publish(barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            Upkeep(engine).publish_catalog(definitions)
        except BaseException as exc:  # collected, asserted below with the round it failed in
            errors.append(exc)

    for _ in range(ROUNDS):
        barrier = threading.Barrier(WORKERS)
        threads = [threading.Thread(target=publish, args=(barrier,)) for _ in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, f"a publication failed: {errors[0]!r}"
    assert [row[0] for row in names(engine)] == ["add", "search_docs", "write_note"]


def test_a_publication_replaces_the_previous_catalogue(engine: Engine) -> None:
    upkeep = Upkeep(engine)
    upkeep.publish_catalog(tools("add", "old_tool"))
    upkeep.publish_catalog(tools("add", "new_tool"))
    assert [row[0] for row in names(engine)] == ["add", "new_tool"]
    upkeep.publish_catalog([])
    assert names(engine) == []
