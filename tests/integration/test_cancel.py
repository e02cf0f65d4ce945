"""Cancel, on PostgreSQL and SQLite, with an in-process worker host on a live channel of its own:
wherever the turn is (the model answering, a slow tool, queued, its worker dead), what each
cancel writes, that asking twice is harmless, the `interrupt` busy policy, and bad input.

    the turn when cancel comes          what happens
    ----------------------------------  ------------------------------------------------------------
    the model is answering              the request is aborted; `cancelled`, no assistant message
    a tool runs                         the call is cancelled; every open call gets the "cancelled
                                        by the user" result; `cancelled`
    queued, no worker                   `cancelled` by the command itself; a late doorbell finds
                                        nothing to do
    its worker died, lease expired      `cancelled` by the command: open calls answered, the epoch
                                        moved on (the dead worker's late write is refused)
    its worker died, lease still live   the request waits; the next claim (recovery) cancels it
    the live notice is lost             the worker sees the committed request at its heartbeat
    finished                            returned unchanged, nothing written
    waiting behind the running one      the request; when its turn comes it is cancelled at its
                                        claim, before any model call
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.errors import ConversationNotFound, TurnNotFound
from app.live.memory import MemoryChannel
from app.models import CANCELLED_CALL_RESULT, Conversation, Event, Message, Turn
from app.testing import fakes
from app.worker.host import WorkerHost
from app.worker.plan import CANCELLED_RESULT, ToolCall
from app.worker.ports import ModelReply, ModelRequest, Usage
from app.worker.store import LeaseLost, TurnStore, Upkeep
from tests.integration.test_turns import log
from tests.rows import force_status

HANG = 60.0  # a model or a tool that would take this long: a cancel must not wait for it


class Gate:
    """Counts what the fakes were asked and lets a test wait until they are busy."""

    def __init__(self) -> None:
        self.model_calls = 0
        self.tool_started = 0
        self.tool_cancelled = 0

    async def slow_model(self, request: ModelRequest) -> ModelReply:
        self.model_calls += 1
        await asyncio.sleep(HANG)
        return fakes.text("too late")

    async def slow_tool(self) -> str:
        self.tool_started += 1
        try:
            await asyncio.sleep(HANG)
        except asyncio.CancelledError:
            self.tool_cancelled += 1
            raise
        return "slept"


def settings(database_url: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "database_url": database_url,
        "lease_ttl_seconds": 30,
        "heartbeat_seconds": 10,
        "recovery_interval_seconds": 60,
        **overrides,
    }
    return load_settings(**values)


@pytest.fixture
def engine_(any_database_url: str) -> Iterator[Engine]:
    engine = make_engine(any_database_url, pool_size=8, max_overflow=2)
    yield engine
    engine.dispose()


@pytest.fixture
def channel() -> MemoryChannel:
    return MemoryChannel()


@pytest.fixture
def gate() -> Gate:
    return Gate()


def tools(gate: Gate) -> fakes.InMemoryTools:
    return fakes.InMemoryTools({"slow": gate.slow_tool, "add": lambda a, b: str(a + b)})


@pytest.fixture
def client(engine_: Engine, channel: MemoryChannel, gate: Gate) -> ChatClient:
    asyncio.run(_publish(engine_, tools(gate)))
    return ChatClient(
        settings(str(engine_.url)), engine=engine_, enqueue=lambda _: None, live=channel
    )


async def _publish(engine: Engine, toolbox: fakes.InMemoryTools) -> None:
    Upkeep(engine).publish_catalog(await toolbox.definitions())


def start_host(
    engine: Engine,
    channel: MemoryChannel | None,
    model: fakes.ScriptedModel,
    gate: Gate,
    **overrides: Any,
) -> WorkerHost:
    host = WorkerHost(
        settings(str(engine.url), **overrides),
        engine,
        model=model,
        tools=tools(gate),
        owner=f"host-{uuid.uuid4().hex[:6]}",
        live=channel,
    )
    host.start()
    return host


@pytest.fixture
def hosts() -> Iterator[list[WorkerHost]]:
    started: list[WorkerHost] = []
    yield started
    for host in started:
        host.stop(grace=0)


def wait_for(predicate: Callable[[], object], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def resting(client: ChatClient, conversation_id: uuid.UUID) -> bool:
    return not client.get_conversation(conversation_id).is_running


def counts(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as connection:
        return tuple(  # type: ignore[return-value]
            int(connection.execute(select(func.count()).select_from(table)).scalar_one())
            for table in (Turn, Message, Event)
        )


def test_the_result_of_a_cancelled_call_is_one_text_on_both_sides() -> None:
    assert CANCELLED_RESULT == CANCELLED_CALL_RESULT


def test_a_cancel_while_the_model_answers_aborts_the_call_and_ends_the_turn_cancelled(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    model = fakes.ScriptedModel(gate.slow_model)
    hosts.append(host := start_host(engine_, channel, model, gate))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    host.ring(conversation_id)
    wait_for(lambda: gate.model_calls == 1)

    started = time.monotonic()
    requested = client.cancel(conversation_id)
    assert requested is not None and requested.id == turn_id
    assert requested.status == "running" and requested.cancel_requested_at is not None
    wait_for(lambda: resting(client, conversation_id))
    assert time.monotonic() - started < HANG / 4  # it did not wait for the model

    turn = client.get_turn(turn_id)  # type: ignore[arg-type]
    assert (turn.status, turn.error) == ("cancelled", None)
    view = client.get_conversation(conversation_id)
    assert view.status == "idle"
    assert [m.role for m in view.messages] == ["user"]
    assert log(client, conversation_id)[-3:] == [
        "turn.cancel_requested",
        "turn.cancelled",
        "status.changed idle",
    ]


def test_a_cancel_during_a_slow_tool_cancels_it_and_answers_every_open_call(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    model = fakes.ScriptedModel(
        fakes.by_iteration(
            [fakes.calls(("c1", "slow", {}), ("c2", "add", {"a": 1, "b": 2})), fakes.text("-")]
        )
    )
    hosts.append(host := start_host(engine_, channel, model, gate))
    conversation_id = client.create_conversation(tools=["slow", "add"])
    turn_id = client.submit_message(conversation_id, "go").turn_id
    host.ring(conversation_id)
    wait_for(lambda: gate.tool_started == 1)

    client.cancel(conversation_id)
    wait_for(lambda: resting(client, conversation_id))

    assert gate.tool_cancelled == 1
    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]
    results = [m for m in client.get_conversation(conversation_id).messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content, m.is_error) for m in results] == [
        ("c1", CANCELLED_RESULT, True),
        ("c2", CANCELLED_RESULT, True),
    ]
    assert len(model.requests) == 1  # the model was not asked again


def test_a_queued_turn_nobody_claimed_is_cancelled_without_a_worker(
    engine_: Engine,
    client: ChatClient,
    channel: MemoryChannel,
    gate: Gate,
    hosts: list[Any],
    *,
    caplog: pytest.LogCaptureFixture,
) -> None:
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id

    cancelled = client.cancel(conversation_id)

    assert cancelled is not None and cancelled.status == "cancelled"
    assert cancelled.cancel_requested_at is not None and cancelled.finished_at is not None
    assert client.get_conversation(conversation_id).status == "idle"
    assert log(client, conversation_id) == [
        "turn.queued",
        "message.committed user",
        "status.changed processing",
        "turn.cancelled",
        "status.changed idle",
    ]
    # A doorbell that arrives late finds nothing to do.
    model = fakes.ScriptedModel(gate.slow_model)
    hosts.append(host := start_host(engine_, channel, model, gate))
    caplog.set_level(logging.INFO, logger="app.worker.host")
    host.ring(conversation_id)
    # (the host's word that it took the doorbell and found nothing: not a quiet moment)
    wait_for(lambda: f"conversation {conversation_id}: not_claimed" in caplog.text)
    assert gate.model_calls == 0
    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]


def _dead_worker_in_tool_loop(
    engine: Engine, client: ChatClient, conversation_id: uuid.UUID, lease_ttl: float
) -> Any:
    """A worker claimed the turn, committed two tool calls, and died."""
    store = TurnStore(engine)
    snapshot = store.claim(conversation_id, "dead-worker", lease_ttl)
    assert snapshot is not None
    store.record_tool_calls(
        snapshot.claim,
        status=snapshot.status,
        seq=2,
        parent=1,
        content=None,
        calls=[ToolCall("c1", "add", '{"a": 1, "b": 2}'), ToolCall("c2", "add", "{}")],
        usage=Usage(3, 4),
        ttl=lease_ttl,
    )
    return snapshot.claim


def expire_lease(engine: Engine, conversation_id: uuid.UUID) -> None:
    """The lease's end moved into the past: time passing, without waiting for it."""
    with engine.begin() as connection:
        connection.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id)
            .values(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        )


def test_a_turn_whose_worker_died_is_cancelled_without_a_worker_once_its_lease_expired(
    engine_: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    turn_id = client.submit_message(conversation_id, "go").turn_id
    claim = _dead_worker_in_tool_loop(engine_, client, conversation_id, lease_ttl=30)
    expire_lease(engine_, conversation_id)

    cancelled = client.cancel(conversation_id)

    assert cancelled is not None and cancelled.status == "cancelled"
    view = client.get_conversation(conversation_id)
    assert view.status == "idle"
    assert [(m.role, m.tool_call_id, m.content) for m in view.messages[2:]] == [
        ("tool", "c1", CANCELLED_CALL_RESULT),
        ("tool", "c2", CANCELLED_CALL_RESULT),
    ]
    with pytest.raises(LeaseLost):  # the dead worker, waking up, can write nothing
        TurnStore(engine_).heartbeat(claim, 30)
    assert log(client, conversation_id)[-4:] == [
        "message.committed tool",
        "message.committed tool",
        "turn.cancelled",
        "status.changed idle",
    ]
    assert client.get_turn(turn_id).completion_tokens == 4  # type: ignore[arg-type]


def test_a_turn_whose_dead_worker_still_holds_a_live_lease_is_cancelled_by_the_next_claim(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    turn_id = client.submit_message(conversation_id, "go").turn_id
    _dead_worker_in_tool_loop(engine_, client, conversation_id, lease_ttl=30)

    requested = client.cancel(conversation_id)  # nobody hears it: the worker is dead
    assert requested is not None and requested.status == "running"
    expire_lease(engine_, conversation_id)  # the lease runs out; recovery would now ring the turn
    model = fakes.ScriptedModel(gate.slow_model)
    hosts.append(host := start_host(engine_, channel, model, gate))
    host.ring(conversation_id)
    wait_for(lambda: resting(client, conversation_id))

    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]
    assert gate.model_calls == 0 and gate.tool_started == 0
    assert "turn.resumed attempt 1" in log(client, conversation_id)


def test_a_cancel_whose_live_notice_is_lost_is_seen_at_the_next_heartbeat(
    engine_: Engine, client: ChatClient, gate: Gate, hosts: list[Any]
) -> None:
    model = fakes.ScriptedModel(gate.slow_model)
    deaf = MemoryChannel()  # the worker listens here; the client announces elsewhere
    hosts.append(host := start_host(engine_, deaf, model, gate, heartbeat_seconds=0.3))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    host.ring(conversation_id)
    wait_for(lambda: gate.model_calls == 1)

    client.cancel(conversation_id)
    wait_for(lambda: resting(client, conversation_id), timeout=10)

    assert client.get_turn(turn_id).status == "cancelled"  # type: ignore[arg-type]


def test_cancelling_twice_is_harmless_and_a_finished_turn_stays_as_it_ended(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    model = fakes.ScriptedModel(gate.slow_model)
    hosts.append(host := start_host(engine_, channel, model, gate))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    host.ring(conversation_id)
    wait_for(lambda: gate.model_calls == 1)
    client.cancel(conversation_id)
    client.cancel_turn(turn_id)  # type: ignore[arg-type]
    wait_for(lambda: resting(client, conversation_id))
    before = counts(engine_)

    again = client.cancel(conversation_id)

    assert again is not None and again.status == "cancelled"
    assert counts(engine_) == before
    assert log(client, conversation_id).count("turn.cancel_requested") == 1


def test_a_turn_the_model_answered_before_the_cancel_stays_completed(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    model = fakes.ScriptedModel(lambda request: fakes.text("done"))
    hosts.append(host := start_host(engine_, channel, model, gate))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    host.ring(conversation_id)
    wait_for(lambda: resting(client, conversation_id))
    before = counts(engine_)

    finished = client.cancel(conversation_id)

    assert finished is not None and (finished.id, finished.status) == (turn_id, "completed")
    assert finished.cancel_requested_at is None
    assert counts(engine_) == before


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.003, 0.01])
def test_a_cancel_racing_the_final_answer_leaves_one_consistent_ending(
    engine_: Engine,
    client: ChatClient,
    channel: MemoryChannel,
    gate: Gate,
    hosts: list[Any],
    *,
    delay: float,
) -> None:
    """Whichever commits first wins: an answer and `completed`, or no answer and `cancelled`,
    never both (the invariants, checked after the test, hold either way)."""
    answered = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelReply:
        await asyncio.sleep(0.05)
        answered.set()
        return fakes.text("the answer")

    hosts.append(host := start_host(engine_, channel, fakes.ScriptedModel(answer), gate))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    host.ring(conversation_id)
    wait_for(answered.is_set)
    time.sleep(delay)
    client.cancel(conversation_id)
    wait_for(lambda: resting(client, conversation_id))

    turn = client.get_turn(turn_id)  # type: ignore[arg-type]
    roles = [m.role for m in client.get_conversation(conversation_id).messages]
    assert (turn.status, roles) in [
        ("completed", ["user", "assistant"]),
        ("cancelled", ["user"]),
    ]


def test_a_waiting_turn_cancelled_by_id_is_cancelled_at_its_claim_without_a_model_call(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    release = asyncio.Event()
    host_loop: list[asyncio.AbstractEventLoop] = []

    async def respond(request: ModelRequest) -> ModelReply:
        host_loop.append(asyncio.get_running_loop())
        if request.messages[-1]["content"] == "first":
            await release.wait()
        return fakes.text(f"re: {request.messages[-1]['content']}")

    hosts.append(host := start_host(engine_, channel, fakes.ScriptedModel(respond), gate))
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "first")
    host.ring(conversation_id)
    wait_for(lambda: host_loop)
    second = client.submit_message(conversation_id, "second", on_busy="enqueue").turn_id
    third = client.submit_message(conversation_id, "third", on_busy="enqueue").turn_id

    requested = client.cancel_turn(second)  # type: ignore[arg-type]
    assert (requested.status, requested.started_at) == ("queued", None)
    assert requested.cancel_requested_at is not None
    host_loop[0].call_soon_threadsafe(release.set)
    wait_for(lambda: resting(client, conversation_id))

    view = client.get_conversation(conversation_id)
    assert [m.content for m in view.messages] == [
        "first",
        "re: first",
        "second",  # in the transcript, never answered: the model was not asked
        "third",
        "re: third",
    ]
    assert client.get_turn(second).status == "cancelled"  # type: ignore[arg-type]
    assert client.get_turn(third).status == "completed"  # type: ignore[arg-type]
    assert len(host_loop) == 2  # the model answered "first" and "third" only


def test_interrupt_cancels_the_running_turn_and_runs_the_new_message_next(
    engine_: Engine, client: ChatClient, channel: MemoryChannel, gate: Gate, hosts: list[Any]
) -> None:
    async def respond(request: ModelRequest) -> ModelReply:
        if request.messages[-1]["content"] == "first":
            return await gate.slow_model(request)
        return fakes.text("re: second")

    hosts.append(host := start_host(engine_, channel, fakes.ScriptedModel(respond), gate))
    conversation_id = client.create_conversation()
    first = client.submit_message(conversation_id, "first").turn_id
    host.ring(conversation_id)
    wait_for(lambda: gate.model_calls == 1)
    queued = client.submit_message(conversation_id, "waiting", on_busy="enqueue").turn_id

    submitted = client.submit_message(conversation_id, "second", on_busy="interrupt")
    wait_for(lambda: resting(client, conversation_id))

    assert client.get_turn(first).status == "cancelled"  # type: ignore[arg-type]
    assert client.get_turn(queued).status == "cancelled"  # type: ignore[arg-type]
    assert client.get_turn(submitted.turn_id).status == "completed"  # type: ignore[arg-type]
    view = client.get_conversation(conversation_id)
    assert [m.content for m in view.messages] == ["first", "waiting", "second", "re: second"]


def test_interrupt_of_a_queued_turn_starts_the_new_one_at_once(
    engine_: Engine, client: ChatClient
) -> None:
    rung: list[uuid.UUID] = []
    ringing = ChatClient(client.settings, engine=engine_, enqueue=rung.append, live=client.live)
    conversation_id = ringing.create_conversation()
    first = ringing.submit_message(conversation_id, "first").turn_id

    submitted = ringing.submit_message(conversation_id, "second", on_busy="interrupt")

    assert ringing.get_turn(first).status == "cancelled"  # type: ignore[arg-type]
    assert submitted.enqueued and submitted.seq is None  # its message waits for its claim
    assert rung == [conversation_id, conversation_id]
    assert ringing.current_turn(conversation_id).id == submitted.turn_id  # type: ignore[union-attr]


# --- bad input ----------------------------------------------------------------------------------


def test_cancel_of_a_conversation_that_does_not_exist_is_refused(client: ChatClient) -> None:
    with pytest.raises(ConversationNotFound):
        client.cancel(uuid.uuid4())
    with pytest.raises(ConversationNotFound, match="not a valid id"):
        client.cancel("not-an-id")


def test_cancel_of_an_unknown_turn_is_refused_and_writes_nothing(
    engine_: Engine, client: ChatClient
) -> None:
    before = counts(engine_)
    with pytest.raises(TurnNotFound):
        client.cancel_turn(uuid.uuid4())
    with pytest.raises(TurnNotFound, match="not a valid id"):
        client.cancel_turn("nope")
    assert counts(engine_) == before


def test_cancel_of_a_conversation_without_a_turn_returns_none(client: ChatClient) -> None:
    assert client.cancel(client.create_conversation()) is None


def test_the_janitor_time_and_the_cancel_time_are_the_web_side_s_clock() -> None:
    # holder_is_live compares in UTC whatever the database hands back (SQLite: naive)
    from types import SimpleNamespace

    from app.client.store.journal import holder_is_live

    now = datetime.now(UTC)
    naive_future = (now + timedelta(seconds=5)).replace(tzinfo=None)
    assert holder_is_live(SimpleNamespace(lease_owner="w", lease_expires_at=naive_future), now)
    assert not holder_is_live(SimpleNamespace(lease_owner=None, lease_expires_at=None), now)
    past = now - timedelta(seconds=1)
    assert not holder_is_live(SimpleNamespace(lease_owner="w", lease_expires_at=past), now)


# --- the command line ----------------------------------------------------------------------------


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": os.environ["PATH"], "DATABASE_URL": database_url, "HOME": "/tmp"}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=environment,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_chatworker_cancel_stops_a_turn_and_refuses_what_it_cannot_find(
    engine_: Engine, client: ChatClient
) -> None:
    url = str(engine_.url.render_as_string(hide_password=False))
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id

    done = _cli(url, "cancel", str(conversation_id))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"turn {turn_id} cancelled"
    again = _cli(url, "cancel", "--turn", str(turn_id))  # twice: harmless, the same answer
    assert again.stdout.strip() == f"turn {turn_id} cancelled"
    finished = client.create_conversation()
    answered = client.submit_message(finished, "hi").turn_id
    force_status(engine_, finished, "idle", lease_owner=None)  # as if a worker answered it
    ended = _cli(url, "cancel", str(finished))
    assert ended.stdout.strip() == f"turn {answered} had already ended: completed"

    unknown = _cli(url, "cancel", str(uuid.uuid4()))
    assert unknown.returncode == 2 and "no conversation" in unknown.stderr
    neither = _cli(url, "cancel")
    assert neither.returncode == 2 and "give a conversation id, or --turn" in neither.stderr
