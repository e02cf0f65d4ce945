"""The host of a worker process: many conversations at once, recovery from the database, drain."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.worker.host import WorkerHost
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import TurnStore


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=8, max_overflow=2)
    yield engine
    engine.dispose()


@pytest.fixture
def client(engine: Engine, database_url: str) -> ChatClient:
    return ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )


def make_host(
    engine: Engine,
    model: fakes.ScriptedModel,
    tools: fakes.InMemoryTools | None = None,
    requeued: list[uuid.UUID] | None = None,
    orphan_after: float = 30,
) -> WorkerHost:
    settings = load_settings(
        lease_ttl_seconds=30,
        heartbeat_seconds=5,
        max_in_flight=500,
        recovery_interval_seconds=0.2,
    )
    return WorkerHost(
        settings,
        engine,
        model=model,
        tools=tools or fakes.InMemoryTools({}),
        owner="host-test",
        orphan_after=orphan_after,
        requeue=None if requeued is None else lambda cid, _delay: requeued.append(cid),
    )


def wait_for(predicate: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def statuses(client: ChatClient, ids: list[uuid.UUID]) -> set[str]:
    return {client.get_conversation(i).status for i in ids}


def test_one_process_holds_many_conversations_waiting_on_the_model(
    engine: Engine, client: ChatClient
) -> None:
    conversations = 150
    in_flight = 0
    peak = 0
    all_waiting = asyncio.Event()
    loops: set[str] = set()

    async def slow_model(_: ModelRequest) -> ModelReply:
        # Each call waits until every conversation is waiting on the model at once (or 30 s
        # pass), so the count does not depend on how fast a busy machine submits them.
        nonlocal in_flight, peak
        loops.add(type(asyncio.get_running_loop()).__module__.split(".")[0])
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == conversations:
            all_waiting.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_waiting.wait(), timeout=30)
        in_flight -= 1
        return fakes.text("done")

    worker = make_host(engine, fakes.ScriptedModel(slow_model))
    worker.start()
    try:
        ids = [client.create_conversation() for _ in range(conversations)]
        for conversation_id in ids:
            client.submit_message(conversation_id, "hi")
            worker.ring(conversation_id)
        wait_for(lambda: statuses(client, ids) == {"idle"}, timeout=60)
    finally:
        worker.stop()
    assert peak == conversations, f"only {peak} conversations waited on the model at once"
    assert loops == {"uvloop"}  # the host's loop (`CHATWORKER_EVENT_LOOP`, the default)


def test_the_sweep_revives_a_dead_worker_s_turn_without_anyone_ringing(
    engine: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    dead = TurnStore(engine, clock=lambda: datetime.now(UTC) - timedelta(seconds=120))
    assert dead.claim(conversation_id, "dead-worker", ttl=30) is not None  # expired long ago
    model = fakes.ScriptedModel(lambda _: fakes.text("recovered"))
    worker = make_host(engine, model)
    worker.start()
    try:
        wait_for(lambda: client.get_conversation(conversation_id).status == "idle")
    finally:
        worker.stop()
    assert client.get_conversation(conversation_id).messages[-1].content == "recovered"


def test_a_lost_doorbell_is_rung_again_by_the_sweep(engine: Engine, client: ChatClient) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "nobody enqueued me")
    requeued: list[uuid.UUID] = []
    worker = make_host(
        engine,
        fakes.ScriptedModel(lambda _: fakes.text("ok")),
        requeued=requeued,
        orphan_after=0.3,
    )
    worker.start()
    try:
        wait_for(lambda: conversation_id in requeued)
        assert client.get_conversation(conversation_id).status == "processing"
        worker.ring(conversation_id)  # the queue delivers the re-sent doorbell
        wait_for(lambda: client.get_conversation(conversation_id).status == "idle")
    finally:
        worker.stop()


def test_a_conversation_that_is_not_running_is_not_swept(
    engine: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation()
    requeued: list[uuid.UUID] = []
    worker = make_host(
        engine,
        fakes.ScriptedModel(lambda _: fakes.text("ok")),
        requeued=requeued,
        orphan_after=0,
    )
    worker.start()
    time.sleep(0.6)
    worker.stop()
    assert requeued == []
    assert client.get_conversation(conversation_id).status == "idle"


def test_stopping_releases_unfinished_turns_and_re_enqueues_them(
    engine: Engine, client: ChatClient
) -> None:
    started = threading.Event()

    async def hang() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    tools = fakes.InMemoryTools({"hang": hang})
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "hang", {})), fakes.text("ok")])
    )
    requeued: list[uuid.UUID] = []
    worker = make_host(engine, model, tools=tools, requeued=requeued)
    worker.start()
    conversation_id = client.create_conversation(tools=["hang"])
    client.submit_message(conversation_id, "hang please")
    worker.ring(conversation_id)
    assert started.wait(10)
    worker.stop(grace=0.2)
    assert requeued == [conversation_id]
    view = client.get_conversation(conversation_id)
    assert view.status == "tool_loop"
    row = TurnStore(engine).claim(conversation_id, "next-worker", ttl=30)
    assert row is not None, "the lease was not released"
    assert tools.closed
