"""The liveness token (`app/worker/store/liveness.py`): a lease whose holder's session is gone is
free at once, one whose holder lives (or took no token) waits out its TTL, and the fence still
stops whoever lost it. A holder's death is a terminated backend here (what the server does when a
process dies); the crash tests kill real worker processes (`tests/crash/`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.testing.services import libpq_dsn
from app.worker.host import WorkerHost
from app.worker.store import Deferred, LeaseLost, LivenessToken, TurnStore, Upkeep
from app.worker.store.liveness import NAMESPACE, Check


@pytest.fixture
def client(engine: Engine, database_url: str) -> ChatClient:
    return ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )


@pytest.fixture
def token(engine: Engine) -> Iterator[LivenessToken]:
    held = LivenessToken(engine)
    held.take()
    yield held
    held.close()


def running(client: ChatClient) -> uuid.UUID:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    return conversation_id


def lease_token(engine: Engine, conversation_id: uuid.UUID) -> int | None:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT lease_token FROM conversations WHERE id = :id"), {"id": conversation_id}
        ).scalar_one()


def held_in_pg_locks(engine: Engine, token: int) -> bool:
    with engine.connect() as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND classid = CAST(:ns AS bigint)::oid"
                    " AND objid = CAST(:token AS bigint)::oid AND objsubid = 2"
                ),
                {"ns": NAMESPACE, "token": token},
            ).scalar_one()
        )


def kill_session(engine: Engine, held: LivenessToken) -> None:
    """End the token's session as the server does when its process dies, and wait until its
    lock is gone."""
    assert held.token is not None
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": held._pid})
    wait_for(lambda: not held_in_pg_locks(engine, held.token or 0), "the lock to go")


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_token_is_held_by_a_session_of_its_own_and_by_nobody_else(
    engine: Engine, token: LivenessToken
) -> None:
    assert token.token is not None and 1 <= token.token < 2**31
    assert held_in_pg_locks(engine, token.token)
    assert token.check() is Check.HELD
    # another process drawing the same number cannot take it: it draws again
    draws = iter([token.token, token.token + 1])
    other = LivenessToken(engine, draw=lambda: next(draws))
    try:
        assert other.take() == token.token + 1
    finally:
        other.close()
    number = token.token
    token.close()  # (a clean exit): the number is free again
    assert not held_in_pg_locks(engine, number)
    again = LivenessToken(engine, draw=lambda: number)
    try:
        assert again.take() == number
    finally:
        again.close()


def test_a_claim_records_its_token_and_a_live_holder_keeps_the_lease(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    assert TurnStore(engine, liveness=token).claim(conversation_id, "alive", ttl=30) is not None
    assert lease_token(engine, conversation_id) == token.token
    assert TurnStore(engine).claim(conversation_id, "other", ttl=30) is None
    assert Upkeep(engine).dead_leases() == []


def test_a_dead_holder_s_lease_is_free_at_once_and_the_fence_still_stops_it(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    dead = TurnStore(engine, liveness=token).claim(conversation_id, "dead", ttl=30)
    assert dead is not None and not isinstance(dead, type(None))
    kill_session(engine, token)
    # found by the sweep (its attempts: one claim without a step) long before the 30 s TTL
    assert Upkeep(engine).dead_leases() == [(conversation_id, 1)]
    successor = TurnStore(engine).claim(conversation_id, "successor", ttl=30)
    assert successor is not None and not isinstance(successor, type(None))
    assert successor.taken_over  # (counted as a take-over, like an expired lease)
    assert lease_token(engine, conversation_id) is None  # (the successor holds no token here)
    assert Upkeep(engine).dead_leases() == []
    with pytest.raises(LeaseLost):  # had the dead one lived on, nothing it wrote would count
        TurnStore(engine).heartbeat(dead.claim, ttl=30)  # type: ignore[union-attr]


def test_a_lease_without_a_token_waits_out_its_ttl(engine: Engine, client: ChatClient) -> None:
    conversation_id = running(client)
    assert TurnStore(engine).claim(conversation_id, "untokened", ttl=30) is not None
    assert lease_token(engine, conversation_id) is None
    assert Upkeep(engine).dead_leases() == []
    assert TurnStore(engine).claim(conversation_id, "other", ttl=30) is None


def test_a_released_lease_drops_its_token(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    store = TurnStore(engine, liveness=token)
    snapshot = store.claim(conversation_id, "alive", ttl=30)
    store.release(snapshot.claim)  # type: ignore[union-attr]
    assert lease_token(engine, conversation_id) is None


def test_a_lost_token_is_taken_again_and_only_the_live_runs_leases_follow_it(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    stopped_id = running(client)
    other_id = running(client)
    store = TurnStore(engine, liveness=token)
    live = store.claim(conversation_id, "alive", ttl=30)
    assert live is not None and not isinstance(live, Deferred)
    assert store.claim(stopped_id, "alive", ttl=30)  # its run stopped here (the database went)
    assert store.claim(other_id, "someone else", ttl=30)
    old = token.token
    kill_session(engine, token)  # (a restart, an admin's pg_terminate_backend): the process lives
    assert token.keep("alive", [(conversation_id, live.claim.epoch)]) is Check.LOST
    assert token.token is not None and token.token != old and token.check() is Check.HELD
    assert lease_token(engine, conversation_id) == token.token  # a live run's: moved along
    assert lease_token(engine, stopped_id) == old  # no run of it lives here: free at once
    assert lease_token(engine, other_id) == old  # not this owner's: left as it was
    assert sorted(Upkeep(engine).dead_leases()) == sorted([(stopped_id, 1), (other_id, 1)])


def test_a_live_run_s_lease_follows_the_token_only_at_its_own_epoch(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    snapshot = TurnStore(engine, liveness=token).claim(conversation_id, "alive", ttl=30)
    assert snapshot is not None and not isinstance(snapshot, Deferred)
    old = token.token
    kill_session(engine, token)
    token.keep("alive", [(conversation_id, snapshot.claim.epoch - 1)])  # an older run of it
    assert lease_token(engine, conversation_id) == old


def test_a_token_that_could_not_be_taken_again_is_taken_at_the_next_round(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    conversation_id = running(client)
    assert TurnStore(engine, liveness=token).claim(conversation_id, "alive", ttl=30)
    kill_session(engine, token)
    reachable, unreachable = (
        token.engine,
        make_engine("postgresql+psycopg://postgres@127.0.0.1:1/x"),
    )
    token.engine = unreachable  # (the database is unreachable for a moment)
    try:
        with pytest.raises((OperationalError, psycopg.OperationalError)):
            token.keep("alive", [])
    finally:
        token.engine = reachable
        unreachable.dispose()
    assert token.token is None
    alive = [(conversation_id, 1)]
    assert token.keep("alive", alive) is Check.LOST  # the next round takes one
    assert token.check() is Check.HELD
    assert lease_token(engine, conversation_id) == token.token


def test_a_connection_that_hops_between_server_sessions_gives_the_token_up(
    engine: Engine, database_url: str, client: ChatClient, token: LivenessToken
) -> None:
    """What a pooler in transaction mode does: the next statement runs on another backend."""
    conversation_id = running(client)
    assert TurnStore(engine, liveness=token).claim(conversation_id, "alive", ttl=30)
    pooled_elsewhere = psycopg.connect(libpq_dsn(database_url), autocommit=True)
    first = token._connection
    token._connection = pooled_elsewhere
    try:
        assert token.keep("alive", [(conversation_id, 1)]) is Check.MOVED
    finally:
        first.close()
    assert token.token is None and not token.enabled
    assert lease_token(engine, conversation_id) is None  # its lease waits out its TTL
    assert token.take() is None  # never again in this process
    later = running(client)
    assert TurnStore(engine, liveness=token).claim(later, "alive", ttl=30)
    assert lease_token(engine, later) is None


def test_no_token_when_turned_off_or_on_sqlite(engine: Engine, sqlite_engine: Engine) -> None:
    assert LivenessToken(engine, enabled=False).take() is None
    assert LivenessToken(sqlite_engine).take() is None
    assert LivenessToken(sqlite_engine).check() is Check.OFF
    assert Upkeep(sqlite_engine).dead_leases() == []


@pytest.fixture
def sqlite_engine(migrated_sqlite_template: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{migrated_sqlite_template}")  # (only read)
    yield engine
    engine.dispose()


def test_a_host_re_rings_a_dead_worker_s_turn_within_seconds_at_the_default_settings(
    engine: Engine, client: ChatClient, token: LivenessToken
) -> None:
    settings = load_settings()  # 30 s lease, 15 s TTL sweep, 1 s dead-worker sweep
    assert settings.dead_worker_sweep_seconds == 1.0 and settings.lease_ttl_seconds == 30
    conversation_id = running(client)
    assert TurnStore(engine, liveness=token).claim(conversation_id, "dead", ttl=30)
    requeued: list[uuid.UUID] = []
    host = WorkerHost(
        settings,
        engine,
        model=fakes.ScriptedModel(lambda _: fakes.text("recovered")),
        tools=fakes.InMemoryTools({}),
        owner="survivor",
        requeue=lambda cid, _delay: requeued.append(cid),
    )
    host.start()
    try:
        time.sleep(2.5)  # a live holder: the survivor's sweeps leave it alone
        assert requeued == []
        killed = time.monotonic()
        kill_session(engine, token)
        wait_for(lambda: conversation_id in requeued, "the re-ring", timeout=30)
        assert time.monotonic() - killed < 10  # (a sweep a second; 15 s TTL sweeps otherwise)
        assert host.liveness.token is not None  # the survivor holds its own
    finally:
        host.stop()


def test_a_token_s_session_is_named_after_its_worker(engine: Engine) -> None:
    """The operators' fleet reads who holds which token: the session is named after the
    process's lease owner name (at most 63 characters, as PostgreSQL keeps it)."""
    named = LivenessToken(engine, owner="host-a:4242:beef")
    held = named.take()
    assert held is not None
    with engine.connect() as connection:
        name = connection.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a"
                " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.objid = :token"
            ),
            {"token": held},
        ).scalar_one()
    assert name == "chatworker liveness host-a:4242:beef"
    named.close()
    assert len(LivenessToken(engine, owner="x" * 100).name) == 63
