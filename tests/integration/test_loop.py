"""The durable loop on a real database, with in-process model and tools (app.testing.fakes).

Crash points are reproduced by committing the state a dead worker would have left (through the
store, under an expired lease) and running a fresh TurnRunner on it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from app.client import ChatClient
from app.config import Settings, load_settings
from app.db import make_engine
from app.live import ANY_STREAM, RESUMED, Discarded
from app.live.memory import MemoryChannel
from app.models import Conversation
from app.testing import fakes
from app.worker.broadcast import Broadcaster
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.messages import INTERRUPTED_RESULT
from app.worker.plan import GAVE_UP_ERROR, MAX_ITERATIONS_ERROR, ToolCall
from app.worker.ports import ModelError, ModelReply, Usage
from app.worker.store import TurnStore, Upkeep

CONFIG = load_settings(
    max_iterations=20, lease_ttl_seconds=30, heartbeat_seconds=10, max_attempts=3
)


@dataclass
class World:
    engine: Engine
    store: TurnStore
    upkeep: Upkeep
    client: ChatClient
    tools: fakes.InMemoryTools
    rung: list[uuid.UUID] = field(default_factory=list)

    def runner(
        self,
        model: fakes.ScriptedModel,
        owner: str = "worker-1",
        settings: Settings = CONFIG,
        store: TurnStore | None = None,
    ) -> TurnRunner:
        return TurnRunner(
            store or self.store, model=model, tools=self.tools, settings=settings, owner=owner
        )

    def conversation(self, text: str = "What is 1 + 2?", **options: Any) -> uuid.UUID:
        options.setdefault("tools", ["add", "write_note", "explode", "secret"])
        conversation_id = self.client.create_conversation(**options)
        self.client.submit_message(conversation_id, text)
        return conversation_id

    def roles(self, conversation_id: uuid.UUID) -> list[str]:
        return [m.role for m in self.client.get_conversation(conversation_id).messages]

    def row(self, conversation_id: uuid.UUID) -> Conversation:
        from sqlalchemy.orm import Session

        with Session(self.engine) as session:
            return session.get_one(Conversation, conversation_id)


def make_tools() -> fakes.InMemoryTools:
    def explode() -> str:
        raise RuntimeError("kaboom")

    notes: list[str] = []

    def write_note(text: str) -> str:
        notes.append(text)
        return f"saved {len(notes)}"

    return fakes.InMemoryTools(
        {
            "add": lambda a, b: str(a + b),
            "write_note": write_note,
            "explode": explode,
            "secret": lambda: "classified",
        }
    )


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    url = any_database_url
    engine = make_engine(url)
    tools = make_tools()
    upkeep = Upkeep(engine)
    asyncio.run(_publish(upkeep, tools))
    rung: list[uuid.UUID] = []
    client = ChatClient(load_settings(database_url=url), engine=engine, enqueue=rung.append)
    yield World(engine, TurnStore(engine), upkeep, client, tools, rung)
    engine.dispose()


async def _publish(upkeep: Upkeep, tools: fakes.InMemoryTools) -> None:
    upkeep.publish_catalog(await tools.definitions())


def run(runner: TurnRunner, conversation_id: uuid.UUID) -> Outcome:
    return asyncio.run(runner.run(conversation_id))


def gap_free(world: World, conversation_id: uuid.UUID) -> bool:
    seqs = [m.seq for m in world.client.get_conversation(conversation_id).messages]
    return seqs == list(range(1, len(seqs) + 1))


ADD_THEN_ANSWER = fakes.by_iteration(
    [fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("It is 3.")]
)


# --- the paths --------------------------------------------------------------------------------


def test_simple_path_is_one_model_call(world: World) -> None:
    conversation_id = world.conversation("Hello", tools=[])
    model = fakes.ScriptedModel(lambda _: fakes.text("Hi there"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert len(model.requests) == 1 and model.requests[0].tools == []
    view = world.client.get_conversation(conversation_id)
    assert (view.status, view.iterations, view.error) == ("idle", 1, None)
    assert [(m.role, m.content) for m in view.messages] == [
        ("user", "Hello"),
        ("assistant", "Hi there"),
    ]
    assert (view.prompt_tokens, view.completion_tokens) == (10, 5)


def test_tool_choice_none_takes_the_simple_path(world: World) -> None:
    conversation_id = world.conversation(tool_choice="none")
    model = fakes.ScriptedModel(lambda _: fakes.text("no tools"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert model.requests[0].tools == []


@pytest.mark.parametrize(
    ("given", "first"),
    [
        ("required", "required"),
        ({"type": "function", "name": "add"}, {"type": "function", "function": {"name": "add"}}),
    ],
    ids=["required", "named"],
)
def test_a_forced_tool_choice_binds_each_turn_s_first_model_call_only(
    world: World, given: Any, first: Any
) -> None:
    """A server's tool runs and comes back: forced on every call, the turn would call it until
    its iteration limit. The first call is forced, the next one (after the result) is `auto`,
    and the next turn's first call is forced again."""
    conversation_id = world.conversation(tool_choice=given)
    view = world.client.get_conversation(conversation_id)
    assert (view.tool_choice, view.forced_tool) == (
        "required",
        None if given == "required" else "add",
    )
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert [request.tool_choice for request in model.requests] == [first, "auto"]
    world.client.submit_message(conversation_id, "And 2 + 2?")
    again = fakes.ScriptedModel(ADD_THEN_ANSWER)
    assert run(world.runner(again), conversation_id) is Outcome.IDLE
    assert [request.tool_choice for request in again.requests] == [first, "auto"]


def test_a_turn_with_a_tool_call(world: World) -> None:
    conversation_id = world.conversation(instructions="Be exact.")
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert view.status == "idle" and view.iterations == 2
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert view.messages[1].tool_calls == [
        {"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    ]
    assert (view.messages[2].tool_call_id, view.messages[2].content) == ("c1", "3")
    assert view.messages[3].content == "It is 3."
    assert world.tools.executed == [("add", {"a": 1, "b": 2})]
    first, second = model.requests
    assert first.messages[0] == {"role": "system", "content": "Be exact."}
    assert {t["function"]["name"] for t in first.tools} == {
        "add",
        "write_note",
        "explode",
        "secret",
        "agent_clarify",  # the model may ask the user (offered by default with tools)
    }  # (the session cache's readers come once an output is cut short: test_session_cache)
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "3"}
    assert (view.prompt_tokens, view.completion_tokens) == (20, 10)
    assert gap_free(world, conversation_id)


def test_several_tool_calls_in_one_message_run_in_order(world: World) -> None:
    conversation_id = world.conversation()
    model = fakes.ScriptedModel(
        fakes.by_iteration(
            [
                fakes.calls(
                    ("c1", "add", {"a": 1, "b": 1}),
                    ("c2", "write_note", {"text": "x"}),
                    ("c3", "add", {"a": 2, "b": 2}),
                ),
                fakes.text("done"),
            ]
        )
    )
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert [(m.role, m.tool_call_id) for m in view.messages[2:5]] == [
        ("tool", "c1"),
        ("tool", "c2"),
        ("tool", "c3"),
    ]
    assert [name for name, _ in world.tools.executed] == ["add", "write_note", "add"]
    assert gap_free(world, conversation_id)


def test_the_iteration_cap_fails_the_turn_after_20_model_calls(world: World) -> None:
    conversation_id = world.conversation()
    model = fakes.ScriptedModel(lambda _: fakes.calls(("", "add", {"a": 1, "b": 1})))
    assert run(world.runner(model), conversation_id) is Outcome.FAILED
    view = world.client.get_conversation(conversation_id)
    assert (view.status, view.error, view.iterations) == ("failed", MAX_ITERATIONS_ERROR, 20)
    assert len(model.requests) == 20
    # every call the 20th reply asked for was still answered before failing
    assert view.messages[-1].role == "tool"
    ids = [c["id"] for m in view.messages for c in m.tool_calls]
    assert len(ids) == len(set(ids)) == 20  # empty model ids were made unique
    assert gap_free(world, conversation_id)


# --- tool errors are results, fed back --------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall("c1", "nope", "{}"), "Unknown tool: nope"),
        (ToolCall("c1", "add", '{"a": 1,'), "not valid JSON"),
        (ToolCall("c1", "add", "[1, 2]"), "expected a JSON object"),
        (ToolCall("c1", "explode", "{}"), "Tool explode failed: kaboom"),
        (ToolCall("c1", "add", '{"a": 1}'), "Tool add failed"),
    ],
)
def test_tool_errors_become_error_results_and_the_loop_goes_on(
    world: World, call: ToolCall, expected: str
) -> None:
    conversation_id = world.conversation()
    reply = ModelReply(None, (call,), "tool_calls", Usage())
    model = fakes.ScriptedModel(fakes.by_iteration([reply, fakes.text("sorry")]))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    result = world.client.get_conversation(conversation_id).messages[2]
    assert result.role == "tool" and result.is_error
    assert expected in (result.content or "")
    assert model.requests[1].messages[-1]["content"] == result.content


def test_a_tool_that_is_not_allowed_is_never_executed(world: World) -> None:
    conversation_id = world.conversation(tools=["add"])
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "secret", {})), fakes.text("ok")])
    )
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert world.tools.executed == []
    offered = [t["function"]["name"] for t in model.requests[0].tools]
    assert offered == ["add", "agent_clarify"]
    result = world.client.get_conversation(conversation_id).messages[2]
    assert result.is_error and "not allowed" in (result.content or "")


def test_a_model_error_fails_the_turn_with_its_message(world: World) -> None:
    conversation_id = world.conversation()
    model = fakes.ScriptedModel(
        fakes.by_iteration([ModelError("LLM call failed (HTTP 400 BadRequestError): bad")])
    )
    assert run(world.runner(model), conversation_id) is Outcome.FAILED
    view = world.client.get_conversation(conversation_id)
    assert (
        view.status == "failed" and view.error == "LLM call failed (HTTP 400 BadRequestError): bad"
    )
    assert world.row(conversation_id).lease_owner is None


def test_an_empty_reply_fails_the_turn_clearly(world: World) -> None:
    conversation_id = world.conversation()
    model = fakes.ScriptedModel(lambda _: fakes.text("  "))
    assert run(world.runner(model), conversation_id) is Outcome.FAILED
    assert (
        world.client.get_conversation(conversation_id).error
        == "The model returned an empty message"
    )


# --- resume at each crash point -----------------------------------------------------------------


def past_store(world: World, seconds: float = 120) -> TurnStore:
    """A store whose clock is in the past: its claims are already expired now."""
    return TurnStore(world.engine, clock=lambda: datetime.now(UTC) - timedelta(seconds=seconds))


THREE_CALLS = (
    ToolCall("c1", "add", '{"a": 1, "b": 1}'),
    ToolCall("c2", "write_note", '{"text": "once"}'),
    ToolCall("c3", "add", '{"a": 2, "b": 2}'),
)
RESUME_MODEL = fakes.by_iteration(
    [ModelReply(None, THREE_CALLS, "tool_calls", Usage(10, 5)), fakes.text("all done")]
)


def dead_worker_left(world: World, conversation_id: uuid.UUID, results: int, calls: bool) -> None:
    """Commit what a worker that died at this point would have committed."""
    dead = past_store(world)
    snapshot = dead.claim(conversation_id, "dead-worker", ttl=30)
    assert snapshot is not None
    if not calls:
        return
    dead.record_tool_calls(
        snapshot.claim,
        status=snapshot.status,
        seq=2,
        parent=1,
        content=None,
        calls=THREE_CALLS,
        usage=Usage(10, 5),
        ttl=30,
    )
    for index in range(results):
        dead.record_tool_result(
            snapshot.claim,
            status="tool_loop",
            seq=3 + index,
            parent=2 + index,
            call=THREE_CALLS[index],
            content="done",
            is_error=False,
            ttl=30,
        )


@pytest.mark.parametrize(
    ("calls", "results", "expected_runs"),
    [
        (False, 0, ["add", "write_note", "add"]),  # claimed, died before/during the LLM call
        (True, 0, ["add", "write_note", "add"]),  # tool calls committed, no tool started
        (True, 1, ["write_note", "add"]),  # one result committed
        (True, 2, ["add"]),  # two results committed
        (True, 3, []),  # all results committed, died before the next LLM call
    ],
)
def test_resume_runs_only_unanswered_tool_calls(
    world: World, calls: bool, results: int, expected_runs: list[str]
) -> None:
    conversation_id = world.conversation()
    dead_worker_left(world, conversation_id, results, calls)
    model = fakes.ScriptedModel(RESUME_MODEL)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert [name for name, _ in world.tools.executed] == expected_runs
    view = world.client.get_conversation(conversation_id)
    assert view.status == "idle"
    assert [m.role for m in view.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]
    assert [m.tool_call_id for m in view.messages[2:5]] == ["c1", "c2", "c3"]
    assert gap_free(world, conversation_id)


def test_resume_after_the_final_answer_does_nothing(world: World) -> None:
    conversation_id = world.conversation()
    run(world.runner(fakes.ScriptedModel(ADD_THEN_ANSWER)), conversation_id)
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    assert run(world.runner(model, owner="redelivered"), conversation_id) is Outcome.NOT_CLAIMED
    assert model.requests == []
    assert world.roles(conversation_id) == ["user", "assistant", "tool", "assistant"]


def test_a_live_lease_is_not_taken(world: World) -> None:
    conversation_id = world.conversation()
    assert world.store.claim(conversation_id, "alive", ttl=30) is not None
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    assert run(world.runner(model, owner="other"), conversation_id) is Outcome.NOT_CLAIMED
    assert model.requests == []


# --- ownership -----------------------------------------------------------------------------------


def test_two_workers_handed_the_same_job_run_it_once(world: World) -> None:
    conversation_id = world.conversation()
    release = threading.Event()

    async def slow_model(_: Any) -> ModelReply:
        await asyncio.to_thread(release.wait, 5)
        return fakes.calls(("c1", "write_note", {"text": "once"}))

    calls_then_answer = fakes.by_iteration(
        [fakes.calls(("c1", "write_note", {"text": "once"})), fakes.text("ok")]
    )

    def responder(request: Any) -> Any:
        if len(request.messages) == 1:
            return slow_model(request)
        return calls_then_answer(request)

    first, second = fakes.ScriptedModel(responder), fakes.ScriptedModel(responder)

    async def both() -> list[Outcome]:
        tasks = [
            asyncio.create_task(world.runner(first, owner="a").run(conversation_id)),
            asyncio.create_task(world.runner(second, owner="b").run(conversation_id)),
        ]
        await asyncio.sleep(0.3)
        release.set()
        return list(await asyncio.gather(*tasks))

    outcomes = asyncio.run(both())
    assert sorted(o.value for o in outcomes) == ["idle", "not_claimed"]
    assert world.tools.executed == [("write_note", {"text": "once"})]
    assert world.roles(conversation_id) == ["user", "assistant", "tool", "assistant"]


def test_a_worker_whose_lease_was_taken_over_writes_nothing_more(world: World) -> None:
    conversation_id = world.conversation()
    tool_started, finish_tool = threading.Event(), threading.Event()

    async def blocking_note(text: str) -> str:
        tool_started.set()
        await asyncio.to_thread(finish_tool.wait, 5)
        return "written late"

    world.tools.tools["write_note"] = blocking_note
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "write_note", {"text": "x"})), fakes.text("ok")])
    )
    # The zombie's clock says its lease is long expired, so a second worker may claim at once.
    zombie = world.runner(model, owner="zombie", store=past_store(world))

    async def scenario() -> Outcome:
        task = asyncio.create_task(zombie.run(conversation_id))
        await asyncio.to_thread(tool_started.wait, 5)
        taken = await asyncio.to_thread(world.store.claim, conversation_id, "usurper", 30)
        assert taken is not None
        finish_tool.set()
        return await task

    assert asyncio.run(scenario()) is Outcome.LEASE_LOST
    view = world.client.get_conversation(conversation_id)
    assert [m.role for m in view.messages] == ["user", "assistant"]  # the late result was refused
    assert world.row(conversation_id).lease_owner == "usurper"


def test_the_heartbeat_renews_the_lease_while_a_tool_runs(world: World) -> None:
    conversation_id = world.conversation()
    beats: list[datetime] = []

    async def slow_note(text: str) -> str:
        for _ in range(10):
            await asyncio.sleep(0.15)
            beats.append(world.row(conversation_id).lease_expires_at)
        return "ok"

    world.tools.tools["write_note"] = slow_note
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "write_note", {"text": "x"})), fakes.text("ok")])
    )
    settings = load_settings(lease_ttl_seconds=5, heartbeat_seconds=0.1)
    assert run(world.runner(model, settings=settings), conversation_id) is Outcome.IDLE
    assert len(set(beats)) >= 3, beats  # the expiry moved forward while the tool ran


def test_losing_the_lease_during_a_hang_stops_the_worker_at_once(world: World) -> None:
    conversation_id = world.conversation()

    hanging = asyncio.Event()

    async def hang(text: str) -> str:
        hanging.set()
        await asyncio.sleep(30)
        return "never"

    world.tools.tools["write_note"] = hang
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "write_note", {"text": "x"})), fakes.text("ok")])
    )
    settings = load_settings(lease_ttl_seconds=30, heartbeat_seconds=0.05)
    zombie = world.runner(model, owner="zombie", settings=settings, store=past_store(world))

    async def scenario() -> Outcome:
        task = asyncio.create_task(zombie.run(conversation_id))
        # (inside the hang, whatever the machine's load: a fixed 0.3 s was not always enough)
        await asyncio.wait_for(hanging.wait(), timeout=30)
        assert await asyncio.to_thread(world.store.claim, conversation_id, "usurper", 30)
        return await asyncio.wait_for(task, timeout=30)  # (its next heartbeat: 0.05 s)

    assert asyncio.run(scenario()) is Outcome.LEASE_LOST
    assert world.roles(conversation_id) == ["user", "assistant"]


def test_a_turn_that_keeps_killing_its_worker_gives_up_after_max_attempts(world: World) -> None:
    conversation_id = world.conversation()
    for attempt in range(CONFIG.max_attempts):  # each dead claim expired before the next
        dead = past_store(world, seconds=100 * (CONFIG.max_attempts - attempt))
        assert dead.claim(conversation_id, "dies-every-time", ttl=30) is not None
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    channel = MemoryChannel()
    broadcaster = Broadcaster(channel, flush_interval=10)
    runner = TurnRunner(
        world.store,
        model=model,
        tools=world.tools,
        settings=CONFIG,
        owner="worker-1",
        broadcaster=broadcaster,
    )
    assert run(runner, conversation_id) is Outcome.FAILED
    view = world.client.get_conversation(conversation_id)
    assert view.error == GAVE_UP_ERROR.format(attempts=CONFIG.max_attempts)
    assert model.requests == []
    # the reply the last dead worker may have been streaming: its readers are told to drop it
    broadcaster.close()
    entries = channel.read(conversation_id, None).entries
    assert Discarded(2, ANY_STREAM, RESUMED) in entries


def test_a_committed_step_resets_the_attempt_count(world: World) -> None:
    conversation_id = world.conversation()
    dead_worker_left(world, conversation_id, results=1, calls=True)
    assert world.row(conversation_id).attempts == 0


# --- history repair and retry -------------------------------------------------------------------


def test_retry_runs_the_pending_calls_of_a_failed_turn_first(world: World) -> None:
    conversation_id = world.conversation()
    dead_worker_left(world, conversation_id, results=1, calls=True)
    world.upkeep.fail_stale(older_than=0, error="stuck")
    assert world.client.get_conversation(conversation_id).status == "failed"
    submitted = world.client.retry_conversation(conversation_id)
    assert submitted.enqueued and world.rung[-1] == conversation_id
    assert world.client.get_conversation(conversation_id).status == "processing"
    model = fakes.ScriptedModel(RESUME_MODEL)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert [name for name, _ in world.tools.executed] == ["write_note", "add"]
    assert len(model.requests) == 1


def test_a_new_message_after_a_failed_turn_repairs_the_dangling_calls(world: World) -> None:
    conversation_id = world.conversation()
    dead_worker_left(world, conversation_id, results=1, calls=True)
    world.upkeep.fail_stale(older_than=0, error="stuck")
    world.client.submit_message(conversation_id, "Forget it, just say hi")
    model = fakes.ScriptedModel(lambda _: fakes.text("hi"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    sent = model.requests[0].messages
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["c1", "c2", "c3"]
    assert [m["content"] for m in tool_messages] == ["done", INTERRUPTED_RESULT, INTERRUPTED_RESULT]
    assert world.tools.executed == []


# --- cost -------------------------------------------------------------------------------------


def priced(reply: ModelReply, cost: float | None) -> ModelReply:
    return replace(reply, usage=replace(reply.usage, cost_usd=cost))


def test_cost_adds_up_per_turn_and_conversation_and_an_unknown_price_stays_unknown(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])
    first = fakes.ScriptedModel(
        fakes.by_iteration(
            [
                priced(fakes.calls(("c1", "add", {"a": 1, "b": 2})), 0.25),
                priced(fakes.text("3"), 0.5),
            ]
        )
    )
    assert run(world.runner(first), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    turn_one = world.client.current_turn(conversation_id)
    assert turn_one is not None
    assert view.cost_usd == turn_one.cost_usd == 0.75

    world.client.submit_message(conversation_id, "And with an unpriced model?")
    unpriced = fakes.ScriptedModel(fakes.by_iteration([priced(fakes.text("4"), None)]))
    assert run(world.runner(unpriced), conversation_id) is Outcome.IDLE
    turn_two = world.client.current_turn(conversation_id)
    assert turn_two is not None and turn_two.cost_usd is None  # unknown, not zero
    assert world.client.get_conversation(conversation_id).cost_usd is None
    assert world.client.get_turn(turn_one.id).cost_usd == 0.75  # the first turn's stays known


@pytest.mark.parametrize("database_io", ["async", "threads"])
def test_a_turn_s_steps_are_awaited_on_the_loop_unless_set_to_threads(
    world: World, database_io: str
) -> None:
    """`CHATWORKER_DATABASE_IO`: on PostgreSQL the steps' statements go through the store's own
    connections on the event loop (`async`, the default) or the engine's pool on the database
    threads; SQLite always takes the threads (its driver would block the loop). The turn is the
    same either way."""
    store = TurnStore(world.engine)
    opened: list[object] = []
    if store.loop_connections is not None:
        store.loop_connections.opened.append(opened.append)
    settings = load_settings(
        max_iterations=20, lease_ttl_seconds=30, heartbeat_seconds=10, database_io=database_io
    )
    conversation_id = world.conversation()
    runner = world.runner(fakes.ScriptedModel(ADD_THEN_ANSWER), settings=settings, store=store)
    assert run(runner, conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert gap_free(world, conversation_id)
    on_postgres = world.engine.dialect.name == "postgresql"
    assert store.steps_on_loop is on_postgres
    # one connection served the turn's three steps in turn (kept, newest first)
    assert len(opened) == (1 if on_postgres and database_io == "async" else 0)
    store.close()
