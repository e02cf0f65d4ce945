"""Per-owner limits: `CHATWORKER_OWNER_MAX_RUNNING_TURNS` turns of one owner run at once.

With the `queue` policy every message is accepted and a worker's claim waits while the owner's
other conversations hold that many live leases (the claim is `DEFERRED`: the conversation's
heartbeat is touched, and it is rung again when one of the owner's turns ends, or by the sweep);
other owners and ownerless conversations are never held back. With `reject` the web side refuses
a turn that would be one too many:

| call, the owner at its limit                             | answer                              |
|----------------------------------------------------------|-------------------------------------|
| a message to a resting conversation, or a retry          | `TooManyRunningTurns`, nothing kept |
| a message queued behind its own running turn (`enqueue`) | accepted (no more turns run)        |
| the same idempotency key again                           | the first turn, as always           |
| another owner's message                                  | accepted                            |

The two-owner fairness figures are in the benchmark (`python -m bench --only fairness`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text, update

from app.client import ChatClient
from app.config import load_settings
from app.errors import TooManyRunningTurns
from app.models import Conversation
from app.testing import fakes
from app.worker.host import WorkerHost
from app.worker.janitor import clean_up
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import DEFERRED_CLAIM, Snapshot, TurnStore
from tests.integration.test_loop import World, make_tools
from tests.integration.test_user_in_the_loop import world_of


def settled(url: str) -> Iterator[World]:
    """A world whose conversations still running at the end are failed by the janitor, so the
    invariants (checked after) hold."""
    worlds = world_of(url, make_tools())
    world = next(worlds)
    yield world
    clean_up(world.upkeep, older_than=0.0)
    next(worlds, None)


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from settled(any_database_url)


def queued(world: World, owner: str | None, count: int = 1) -> list[uuid.UUID]:
    made = []
    for _ in range(count):
        conversation_id = world.client.create_conversation(owner=owner)
        world.client.submit_message(conversation_id, "Hi")
        made.append(conversation_id)
    return made


def leased(world: World, owner: str) -> int:
    with world.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM conversations WHERE owner = :owner"
                    " AND lease_owner IS NOT NULL"
                ),
                {"owner": owner},
            ).scalar_one()
        )


def test_a_claim_waits_while_the_owner_runs_its_limit_and_others_go_on(world: World) -> None:
    first, second, third = queued(world, "alice", 3)
    [bobs] = queued(world, "bob")
    [nobodys] = queued(world, None)
    store = world.store
    a = store.claim(first, "w1", 30, owner_limit=2)
    b = store.claim(second, "w2", 30, owner_limit=2)
    assert isinstance(a, Snapshot) and isinstance(b, Snapshot)
    assert store.claim(third, "w3", 30, owner_limit=2) is DEFERRED_CLAIM
    assert isinstance(store.claim(bobs, "w3", 30, owner_limit=2), Snapshot)
    assert isinstance(store.claim(nobodys, "w3", 30, owner_limit=2), Snapshot)
    assert leased(world, "alice") == 2
    assert world.client.get_conversation(third).status == "processing"  # accepted, waiting
    # One of alice's turns gives its lease up: the waiting one goes.
    store.release(a.claim)
    assert isinstance(store.claim(third, "w3", 30, owner_limit=2), Snapshot)
    # Its own claim again, by a worker that lost track, is no deferral: another worker has it.
    assert store.claim(third, "w4", 30, owner_limit=2) is None


def test_an_expired_lease_does_not_count(world: World) -> None:
    first, second = queued(world, "alice", 2)
    assert isinstance(world.store.claim(first, "dead", 30, owner_limit=1), Snapshot)
    assert world.store.claim(second, "w2", 30, owner_limit=1) is DEFERRED_CLAIM
    with world.engine.begin() as connection:  # the dead worker's lease runs out
        connection.execute(
            update(Conversation)
            .where(Conversation.id == first)
            .values(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        )
    assert isinstance(world.store.claim(second, "w2", 30, owner_limit=1), Snapshot)


def test_a_waiting_turn_s_heartbeat_is_touched_so_the_janitor_leaves_it(world: World) -> None:
    first, second = queued(world, "alice", 2)
    with world.engine.begin() as connection:  # submitted long ago
        connection.execute(
            update(Conversation)
            .where(Conversation.id == second)
            .values(heartbeat_at=datetime(2000, 1, 1, tzinfo=UTC))
        )
    assert isinstance(world.store.claim(first, "w1", 30, owner_limit=1), Snapshot)
    assert world.store.claim(second, "w2", 30, owner_limit=1) is DEFERRED_CLAIM
    assert clean_up(world.upkeep, older_than=300).conversations == []
    assert world.upkeep.owner_waiting(first, 5) == [second]


@pytest.mark.parametrize("round_", range(3))
def test_claims_racing_for_one_owner_never_pass_its_limit(database_url: str, round_: int) -> None:
    """Twelve workers claim twelve of alice's conversations at the same moment, limit 3: the
    owner's advisory lock lets exactly three through."""
    for world in settled(database_url):
        ids = queued(world, "alice", 12)
        stores = [TurnStore(world.engine) for _ in ids]
        start = threading.Barrier(len(ids))
        results: list[object] = [None] * len(ids)

        def claim(
            index: int,
            start: threading.Barrier,
            stores: list[TurnStore],
            ids: list[uuid.UUID],
            results: list[object],
        ) -> None:
            start.wait()
            results[index] = stores[index].claim(ids[index], f"w{index}", 30, owner_limit=3)

        threads = [
            threading.Thread(target=claim, args=(i, start, stores, ids, results))
            for i in range(len(ids))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(isinstance(r, Snapshot) for r in results) == 3, results
        assert sum(r is DEFERRED_CLAIM for r in results) == 9
        assert leased(world, "alice") == 3


class SlowModel:
    """Answers after a while, counting the calls that overlap per owner tag."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.running = 0
        self.most = 0

    def context_window(self, model: str) -> int | None:
        return None

    def takes_schema(self, model: str) -> bool:
        return False

    def takes_file(self, model: str, kind: str) -> bool:
        return False

    async def complete(self, request: ModelRequest, sink: object = None) -> ModelReply:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running -= 1
        return fakes.text("done")


def test_a_worker_runs_an_owner_s_turns_one_by_one_and_all_of_them(database_url: str) -> None:
    for world in settled(database_url):
        settings = load_settings(
            database_url=database_url,
            owner_max_running_turns=1,
            recovery_interval_seconds=60,  # the turn ends ring the next, not the sweep
        )
        model = SlowModel(0.2)
        host = WorkerHost(settings, world.engine, model=model, tools=world.tools, owner="w")
        host.start()
        try:
            ids = queued(world, "alice", 4)
            for conversation_id in ids:
                host.ring(conversation_id)
            deadline = time.monotonic() + 30
            while any(world.client.get_conversation(i).status != "idle" for i in ids):
                assert leased(world, "alice") <= 1
                assert time.monotonic() < deadline, "alice's turns did not all finish"
                time.sleep(0.02)
        finally:
            host.stop()
        assert model.most == 1


def limited_client(world: World) -> ChatClient:
    settings = load_settings(
        database_url=str(world.engine.url.render_as_string(hide_password=False)),
        owner_max_running_turns=1,
        owner_limit_policy="reject",
    )
    return ChatClient(settings, engine=world.engine, enqueue=world.rung.append)


def test_the_reject_policy_refuses_one_turn_too_many_and_writes_nothing(world: World) -> None:
    client = limited_client(world)
    first = client.create_conversation(owner="alice")
    second = client.create_conversation(owner="alice")
    client.submit_message(first, "one", idempotency_key="k1")
    events = client.events(second).events
    with pytest.raises(TooManyRunningTurns, match="already runs 1 turns") as refused:
        client.submit_message(second, "two")
    assert refused.value.retry_after == 5
    assert client.get_conversation(second).status == "idle"
    assert client.get_conversation(second).messages == []
    assert client.events(second).events == events
    # Not one more running turn: queued behind its own, a replay, another owner's.
    assert client.submit_message(first, "behind", on_busy="enqueue").seq is None  # it waits
    assert client.submit_message(first, "one", idempotency_key="k1").repeated
    bobs = client.create_conversation(owner="bob")
    client.submit_message(bobs, "bob's")
    # A retry is a new running turn too.
    failing = fakes.ScriptedModel(fakes.by_iteration([fakes.ModelError("LLM call failed: no")]))
    client.cancel(first)  # its turn, then the one that waited behind it
    client.cancel(first)
    assert client.get_conversation(first).status == "idle"
    client.submit_message(second, "two")
    asyncio.run(world.runner(failing).run(second))
    client.submit_message(first, "again")
    with pytest.raises(TooManyRunningTurns):
        client.retry_conversation(second)
    assert client.get_conversation(second).status == "failed"
