"""The host's recovery rounds (`app/worker/recovery.py`) in process, on PostgreSQL: a run the
database went away under gives its claim back (the lease, and the attempt the claim counted) and
goes on at once; a queued turn nobody took is rung again after a few seconds, then less and less
often, and at once when the queue lost its doorbells; the lost-doorbell query reads its partial
index. The real faults (a PostgreSQL crash, a Redis flush or outage, through a worker process) are
`tests/crash/test_outage_recovery.py`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import Engine, text

from app.client import ChatClient
from app.config import load_settings
from app.models.raw_statement import RawStatement
from app.testing import fakes
from app.testing.services import libpq_dsn
from app.worker.host import WorkerHost
from app.worker.ports import ModelReply, ModelRequest
from app.worker.recovery import Recovery
from app.worker.store import Deferred, LivenessToken, TurnStore, Upkeep
from app.worker.store.doorbells import QUEUED_SINCE
from app.worker.store.liveness import Alive
from app.worker.store.outage import give_back
from app.worker.threads import DatabaseThreads


@pytest.fixture
def client(engine: Engine, database_url: str) -> ChatClient:
    return ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )


def wait_for(condition: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def conversation_row(engine: Engine, conversation_id: uuid.UUID) -> dict[str, object]:
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT lease_owner, lease_epoch, attempts FROM conversations WHERE id = :id"),
            {"id": conversation_id},
        ).one()
    return dict(row._mapping)


# --- a run the database went away under ---------------------------------------------------------


def test_a_given_back_claim_frees_the_lease_and_takes_back_its_attempt_once(
    engine: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    snapshot = TurnStore(engine).claim(conversation_id, "w", ttl=30)
    assert snapshot is not None and not isinstance(snapshot, Deferred)
    assert conversation_row(engine, conversation_id)["attempts"] == 1
    now = Upkeep(engine).clock()
    assert give_back(engine, snapshot.claim, now) == 0
    assert conversation_row(engine, conversation_id) == {
        "lease_owner": None,
        "lease_epoch": snapshot.claim.epoch,
        "attempts": 0,
    }
    assert give_back(engine, snapshot.claim, now) is None  # given back once
    again = TurnStore(engine).claim(conversation_id, "w2", ttl=30)
    assert again is not None and not isinstance(again, Deferred) and again.attempts == 1
    assert give_back(engine, snapshot.claim, now) is None  # another holder's lease: untouched
    assert conversation_row(engine, conversation_id)["lease_owner"] == "w2"


def test_a_run_the_database_went_away_under_goes_on_at_once_and_costs_no_attempt(
    engine: Engine, client: ChatClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The first model call ends with the driver's error, as the commit of its answer does when
    the server is gone; the production lease (30 s) is left to run: only the give-back resumes
    the turn before it."""
    calls: list[float] = []

    def responder(_: ModelRequest) -> ModelReply:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return fakes.text("answered after the outage")

    settings = load_settings()
    assert settings.lease_ttl_seconds == 30
    host = WorkerHost(
        settings,
        engine,
        model=fakes.ScriptedModel(responder),
        tools=fakes.InMemoryTools({}),
        owner="interrupted",
    )
    host.start()
    try:
        conversation_id = client.create_conversation()
        client.submit_message(conversation_id, "hi")
        host.ring(conversation_id)
        wait_for(lambda: client.get_conversation(conversation_id).status == "idle", "the answer")
    finally:
        host.stop()
    view = client.get_conversation(conversation_id)
    assert view.messages[-1].content == "answered after the outage"
    assert len(calls) == 2
    assert "the database went away mid-run" in caplog.text
    assert "run crashed" not in caplog.text
    resumed = [e for e in client.events(conversation_id).events if e.type == "turn.resumed"]
    assert [e.attempt for e in resumed] == [1]  # the outage's claim was given back
    assert conversation_row(engine, conversation_id)["attempts"] == 0


# --- lost doorbells -----------------------------------------------------------------------------


class NoRuns:
    owner = "sweeper"

    def live_claims(self) -> list[Alive]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_queued_turn_nobody_took_is_rung_again_less_and_less_often(
    engine: Engine, client: ChatClient
) -> None:
    first = 0.05
    settings = load_settings(lost_doorbell_seconds=first)
    clock = Clock()
    rung: list[tuple[uuid.UUID, float]] = []
    recovery = Recovery(
        settings,
        upkeep=Upkeep(engine),
        liveness=LivenessToken(engine, enabled=False),
        runs=NoRuns(),
        db=DatabaseThreads(),
        ring=lambda cid, delay: rung.append((cid, clock.now)),
        running=lambda _cid: False,
        orphan_after=30,
        clock=clock,
    )
    queued = client.create_conversation()
    client.submit_message(queued, "nobody rang me")
    running = client.create_conversation()
    client.submit_message(running, "a worker has me")
    assert TurnStore(engine).claim(running, "alive", ttl=30) is not None
    time.sleep(first * 2)  # (the database's clock: both untouched for longer than that)

    def rounds(until: float) -> list[float]:
        while clock.now < until:
            asyncio.run(recovery.watch())
            clock.now = round(clock.now + 0.01, 2)
        return [at - 1000.0 for _, at in rung]

    # rung at once, then after 0.05, 0.1, 0.2, 0.4 s: never more than once per window
    assert rounds(1001.0) == pytest.approx([0.0, 0.05, 0.15, 0.35, 0.75], abs=0.011)
    assert {cid for cid, _ in rung} == {queued}  # (a held lease is not a lost doorbell)
    rung.clear()
    recovery.queue_emptied()  # the queue lost its doorbells: the window does not hold it back
    assert rounds(1001.01) == [pytest.approx(1.0)]


@pytest.mark.raw_rows  # 20,000 conversations written by hand, without turns or events
def test_the_lost_doorbell_query_reads_its_partial_index_even_as_a_generic_plan(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as connection:
        # every 1000th queued, every 10th running under a lease, the rest at rest
        connection.execute(
            text(
                "INSERT INTO conversations (id, model, allowed_tools, status, lease_owner,"
                " heartbeat_at) SELECT gen_random_uuid(), 'm', '[]',"
                " CASE WHEN g % 10 = 0 THEN 'processing' ELSE 'idle' END,"
                " CASE WHEN g % 10 = 0 AND g % 1000 <> 0 THEN 'w' END,"
                " now() - (g || ' seconds')::interval FROM generate_series(1, 20000) g"
            )
        )
        connection.execute(text("ANALYZE conversations"))
    statement = RawStatement(QUEUED_SINCE, engine)
    with psycopg.connect(libpq_dsn(database_url)) as connection:
        # what the worker's prepared statement turns into after five runs: one plan for any cutoff
        connection.execute("SET plan_cache_mode = force_generic_plan")
        connection.execute(f"PREPARE queued AS {statement.sql}")
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                "EXPLAIN EXECUTE queued(now() - interval '3 seconds', 500)"
            )
        )
    assert "ix_conversations_queued" in plan, plan
    assert "Seq Scan" not in plan, plan
    found = Upkeep(engine).unattended(queued_for=3)
    assert found is not None and len(found.queued) == 20 and found.dead == []
