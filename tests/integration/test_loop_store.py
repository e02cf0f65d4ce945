"""The event log read on the API's event loop (`app/client/store/loop_store.py`) against the same
read in a thread (`event_pages.read_events`), on a real database: the same pages of every size and
cursor, the same errors for the same bad inputs; where the driver has no async side (SQLite),
`AsyncChatClient.events` reads in the thread of its offload instead."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, select

from app.client import AsyncChatClient, ChatClient
from app.client.store import quick_submit
from app.client.store.loop_store import LoopStore
from app.client.views import EventPage, Submitted
from app.config import load_settings
from app.db import make_engine
from app.errors import (
    ConversationBusy,
    ConversationNotFound,
    IdempotencyKeyReused,
    InvalidCursor,
    InvalidMessage,
    InvalidRequest,
    MessageTooLarge,
    TurnNotFound,
)
from app.models.tables import conversations, events, messages, turns
from app.testing import fakes
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.store import TurnStore
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_turns import ADD_THEN_ANSWER, SETTINGS, with_the_add_tool
from tests.integration.test_user_in_the_loop import LOCATE, world_of

T = TypeVar("T")


@pytest.fixture
def engine_(any_database_url: str) -> Iterator[Engine]:
    yield from with_the_add_tool(any_database_url)


@pytest.fixture
def postgres_client(database_url: str) -> Iterator[ChatClient]:
    """A client on PostgreSQL only, for the quick path's own tests (SQLite has none)."""
    for engine in with_the_add_tool(database_url):
        settings = load_settings(database_url=database_url)
        client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
        yield client
        client.close()


@pytest.fixture
def client(engine_: Engine) -> Iterator[ChatClient]:
    settings = load_settings(database_url=str(engine_.url))
    client = ChatClient(settings, engine=engine_, enqueue=lambda _: None)
    yield client
    client.close()


def a_turn_with_a_tool(engine: Engine, client: ChatClient, owner: str) -> uuid.UUID:
    """A conversation whose log holds a whole tool turn (messages, statuses, the turn's ends),
    then a second message queued behind nothing (a turn waiting for a worker)."""
    conversation_id = client.create_conversation(tools=["add"], owner=owner)
    client.submit_message(conversation_id, "what is 1 + 2?", owner=owner)
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
    runner = TurnRunner(TurnStore(engine), model=model, tools=tools, settings=SETTINGS, owner="w")
    asyncio.run(runner.run(conversation_id))
    client.submit_message(conversation_id, "and 2 + 2?", owner=owner)
    return conversation_id


async def in_a_thread(step: Callable[[], T]) -> T:
    return await asyncio.to_thread(step)


def both(client: ChatClient, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """The same read in the thread and awaited: each its page, or the error it raised."""

    def outcome(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # (compared below: type and message)
            return (type(exc), str(exc))

    threaded = outcome(functools.partial(client.events, *args, **kwargs))
    on_loop = AsyncChatClient(client, offload=in_a_thread)
    awaited = outcome(lambda: asyncio.run(on_loop.events(*args, **kwargs)))
    return threaded, awaited


def test_pages_read_on_the_loop_are_the_pages_read_in_a_thread(
    engine_: Engine, client: ChatClient
) -> None:
    postgres = engine_.dialect.name == "postgresql"
    assert (client.loop_store is not None) is postgres  # SQLite: the thread, always
    conversation_id = a_turn_with_a_tool(engine_, client, "alice")
    full = client.events(conversation_id, limit=1000, owner="alice")
    last = full.last_seq
    assert len(full.events) == last > 8 and full.status == "processing"  # (the second)
    assert [e.type for e in full.events if e.turn is not None][:2] == [
        "turn.queued",
        "turn.started",
    ]
    assert any(e.message is not None and e.message.tool_calls for e in full.events)
    for after in (0, 1, last - 1, last):
        for limit in (1, 3, 1000):
            threaded, awaited = both(client, conversation_id, after, limit, owner="alice")
            assert isinstance(awaited, EventPage)
            assert awaited == threaded
            assert [e.seq for e in awaited.events] == list(range(after + 1, last + 1))[:limit]
            assert awaited.last_message_seq == full.last_message_seq > 0
    # A conversation without events after the cursor is one row, no event in it.
    fresh = client.create_conversation(owner="alice")
    threaded, awaited = both(client, fresh, 0, 10, owner="alice")
    assert awaited == threaded and awaited.events == [] and awaited.last_seq == 0


# What each bad input gets, on the loop as in the thread (nothing is written by a read).
BAD_READS: list[tuple[str, Callable[[uuid.UUID], tuple[Any, ...]], type[Exception], str]] = [
    ("no such conversation", lambda c: (uuid.uuid4(), 0, 10), ConversationNotFound, "no conv"),
    ("a malformed id", lambda c: ("conversation-7", 0, 10), ConversationNotFound, "not a valid"),
    ("a cursor past the end", lambda c: (c, 99, 10), InvalidCursor, "beyond the last event"),
    ("a cursor past any seq", lambda c: (c, 2**40, 10), InvalidCursor, "beyond the last event"),
    ("a negative cursor", lambda c: (c, -1, 10), InvalidCursor, ">= 0"),
    ("a limit of 0", lambda c: (c, 0, 0), InvalidRequest, "limit must be between 1 and 1000"),
]


@pytest.mark.parametrize(
    ("case", "args", "error", "says"), BAD_READS, ids=[b[0] for b in BAD_READS]
)
def test_bad_reads_get_the_same_error_on_the_loop(
    client: ChatClient,
    *,
    case: str,
    args: Callable[[uuid.UUID], tuple[Any, ...]],
    error: type[Exception],
    says: str,
) -> None:
    conversation_id = client.create_conversation(owner="alice")
    client.submit_message(conversation_id, "hello", owner="alice")
    threaded, awaited = both(client, *args(conversation_id), owner="alice")
    assert awaited == threaded
    assert awaited[0] is error and says in awaited[1], awaited


def test_another_owner_s_conversation_is_not_found_on_the_loop(
    engine_: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation(owner="alice")
    client.submit_message(conversation_id, "hello", owner="alice")
    threaded, awaited = both(client, conversation_id, 0, 10, owner="mallory")
    assert awaited == threaded == (ConversationNotFound, f"no conversation {conversation_id}")
    # The trusted caller (owner None) sees it.
    assert both(client, conversation_id, 0, 10, owner=None)[1].last_seq == 3


def test_the_loop_store_need_the_async_driver() -> None:
    sqlite = make_engine("sqlite://")
    try:
        assert LoopStore.for_engine(sqlite) is None
    finally:
        sqlite.dispose()


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def test_a_turn_read_on_the_loop_is_the_turn_read_in_a_thread(world: World) -> None:
    """A turn that waits for two client calls, one answered: the same view both ways, each
    action's `answered` included; another owner's and an unknown turn are not found."""
    scripted = fakes.ScriptedModel(
        fakes.by_iteration(
            [
                fakes.calls(
                    ("c1", "get_location", {"precision": "city"}),
                    ("c2", "get_location", {"precision": "country"}),
                ),
                fakes.text("Paris, France."),
            ]
        )
    )
    client = world.client
    conversation_id = world.conversation("Where?", tools=[], client_tools=[LOCATE])
    plain = client.current_turn(conversation_id)
    assert plain is not None and plain.actions == ()
    on_loop = AsyncChatClient(client, offload=in_a_thread)
    assert asyncio.run(on_loop.get_turn(plain.id)) == client.get_turn(plain.id)
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    client.answer_actions(plain.id, {"c2": "France"})

    def read(turn_id: Any, owner: str | None) -> tuple[Any, Any]:
        threaded = functools.partial(client.get_turn, turn_id, owner=owner)
        awaited = on_loop.get_turn(turn_id, owner=owner)
        outcomes = []
        for call in (threaded, lambda: asyncio.run(awaited)):
            try:
                outcomes.append(call())
            except Exception as exc:
                outcomes.append((type(exc), str(exc)))
        return outcomes[0], outcomes[1]

    threaded, awaited = read(plain.id, None)
    assert awaited == threaded
    assert [(a.call_id, a.answered) for a in awaited.actions] == [("c1", False), ("c2", True)]
    unknown = uuid.uuid4()
    for turn_id, owner, error, says in [
        (plain.id, "mallory", TurnNotFound, f"no turn {plain.id}"),
        (unknown, None, TurnNotFound, f"no turn {unknown}"),
        ("turn-42", None, TurnNotFound, "not a valid id"),
    ]:
        threaded, awaited = read(turn_id, owner)
        assert awaited == threaded
        assert awaited[0] is error and says in awaited[1], awaited


# --- the common submit on the loop (`quick_submit`) ----------------------------------------------


class Offloads:
    """An offload that runs the step in a thread and remembers which: `submit_message` (the
    general path) or `submitted` (the quick path's notice and doorbell)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, step: Callable[[], T]) -> T:
        self.ran.append(getattr(step, "func", step).__name__)
        return await asyncio.to_thread(step)


def asubmit(client: ChatClient, *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """`AsyncChatClient.submit_message` on a loop of its own: what it returned (or raised), and
    the offloads."""
    offloads = Offloads()
    on_loop = AsyncChatClient(client, offload=offloads)
    try:
        return asyncio.run(on_loop.submit_message(*args, **kwargs)), offloads.ran
    except Exception as exc:
        return (type(exc), str(exc)), offloads.ran


def rows_of(engine: Engine, conversation_id: uuid.UUID) -> dict[str, list[tuple[Any, ...]]]:
    """What a conversation's rows say, ids and times left out (to compare two conversations)."""
    with engine.connect() as connection:
        conversation = connection.execute(
            select(
                conversations.c.status,
                conversations.c.turn_number,
                conversations.c.turn_count,
                conversations.c.event_seq,
                conversations.c.iterations,
                conversations.c.attempts,
                conversations.c.lease_owner,
                conversations.c.error,
            ).where(conversations.c.id == conversation_id)
        ).all()
        turn_rows = connection.execute(
            select(
                turns.c.number, turns.c.status, turns.c.kind, turns.c.message_seq,
                turns.c.parent_seq, turns.c.idempotency_key, turns.c.caller_metadata,
                turns.c.output_schema, turns.c.echo, turns.c.input, turns.c.prompt_tokens,
                turns.c.cost_usd,
            ).where(turns.c.conversation_id == conversation_id).order_by(turns.c.number)
        ).all()  # fmt: skip
        message_rows = connection.execute(
            select(
                messages.c.seq, messages.c.parent_seq, messages.c.active, messages.c.role,
                messages.c.content, messages.c.is_error, messages.c.files,
            ).where(messages.c.conversation_id == conversation_id).order_by(messages.c.seq)
        ).all()  # fmt: skip
        event_rows = connection.execute(
            select(
                events.c.seq, events.c.type, events.c.message_seq, events.c.status,
                events.c.attempt, events.c.data, events.c.turn_id.is_(None),
            ).where(events.c.conversation_id == conversation_id).order_by(events.c.seq)
        ).all()  # fmt: skip
    return {
        "conversation": [tuple(r) for r in conversation],
        "turns": [tuple(r) for r in turn_rows],
        "messages": [tuple(r) for r in message_rows],
        "events": [tuple(r) for r in event_rows],
    }


def test_a_submit_on_the_loop_writes_what_the_general_path_writes(
    engine_: Engine, client: ChatClient
) -> None:
    """Two conversations, the same three submits (a first message, a repeat of its key, a
    message after a finished turn): one on the loop, one through `submit_message`. The rows and
    the answers are the same; on PostgreSQL the loop's took the quick path (no general one)."""
    postgres = engine_.dialect.name == "postgresql"
    quick, general = (client.create_conversation(tools=["add"], owner="o") for _ in range(2))
    schema = {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    for conversation_id, on_loop in ((quick, True), (general, False)):

        def submit(
            text: str,
            conversation_id: uuid.UUID = conversation_id,
            on_loop: bool = on_loop,
            **kwargs: Any,
        ) -> Any:
            if not on_loop:
                return client.submit_message(conversation_id, text, owner="o", **kwargs)
            submitted, ran = asubmit(client, conversation_id, text, owner="o", **kwargs)
            assert ran == (["submitted"] if postgres else ["submit_message"]), ran
            return submitted

        echo = {"store": False, "previous_response_id": None}
        first = submit("what is 1 + 2?", idempotency_key="k1", metadata={"from": "test"}, echo=echo)
        again = submit("what is 1 + 2?", idempotency_key="k1", metadata={"from": "test"})
        assert again.repeated and again.turn_id == first.turn_id and not first.repeated
        assert again.turn == first.turn and first.turn.status == "queued"
        model = fakes.ScriptedModel(ADD_THEN_ANSWER)
        tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
        store = TurnStore(engine_)
        runner = TurnRunner(store, model=model, tools=tools, settings=SETTINGS, owner="w")
        asyncio.run(runner.run(conversation_id))
        then = submit("and 2 + 2?", output_schema=schema)
        assert then.seq == 5 and then.turn.number == 2 and then.turn.output_schema is not None
        assert first.turn.metadata == {"from": "test"} and first.turn.echo == echo
        assert again.turn.echo == echo and then.turn.echo is None  # (a repeat writes nothing)
        assert client.get_turn(first.turn_id).echo == echo
    assert rows_of(engine_, quick) == rows_of(engine_, general)
    assert client.events(quick, limit=1000).last_seq == client.events(general, limit=1000).last_seq


def test_what_the_quick_path_leaves_to_the_general_one(postgres_client: ChatClient) -> None:
    """A busy conversation (enqueue, reject), a budget, a turn waiting for the user, files, a
    key reused with another text: the general path decides, with its own answer or error."""
    client = postgres_client
    busy = client.create_conversation(owner="o")
    client.submit_message(busy, "first", owner="o", idempotency_key="k")
    queued, ran = asubmit(client, busy, "second", owner="o", on_busy="enqueue", echo={"n": 1})
    assert ran == ["submit_message"] and queued.turn.status == "queued" and queued.seq is None
    assert queued.turn.echo == {"n": 1}  # (kept with a waiting turn too)
    refused, ran = asubmit(client, busy, "third", owner="o")
    assert ran == ["submit_message"] and refused[0] is ConversationBusy
    reused, ran = asubmit(client, busy, "not first", owner="o", idempotency_key="k")
    assert ran == ["submit_message"] and reused[0] is IdempotencyKeyReused
    budgeted = client.create_conversation(owner="o")
    client.admin.set_budget(conversation_id=budgeted, max_tokens=1000)
    submitted, ran = asubmit(client, budgeted, "hello", owner="o")
    assert ran == ["submit_message"], ran
    assert submitted.turn.status == "queued"
    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")
    with_files = client.create_conversation(owner="o", model="openai/gpt-4o")
    _, ran = asubmit(client, with_files, "look", owner="o", files=[png])
    assert ran == ["submit_message"]


def test_bad_submits_on_the_loop_get_the_general_path_s_errors(
    engine_: Engine, client: ChatClient
) -> None:
    conversation_id = client.create_conversation(owner="alice")
    for args, kwargs, error, says in [
        ((uuid.uuid4(), "hi"), {"owner": "alice"}, ConversationNotFound, "no conversation"),
        ((conversation_id, "hi"), {"owner": "mallory"}, ConversationNotFound, "no conversation"),
        (("conversation-7", "hi"), {}, ConversationNotFound, "not a valid id"),
        ((conversation_id, ""), {}, InvalidMessage, "is empty"),
        ((conversation_id, "x" * 10**6), {}, MessageTooLarge, "limit"),
        ((conversation_id, "hi"), {"on_busy": "later"}, InvalidRequest, "on_busy must be one of"),
        ((conversation_id, "hi"), {"idempotency_key": ""}, InvalidRequest, "idempotency_key"),
    ]:
        outcome, _ = asubmit(client, *args, **kwargs)
        try:
            client.submit_message(*args, **kwargs)
        except Exception as exc:
            assert outcome == (type(exc), str(exc))
        else:
            raise AssertionError(f"{args} {kwargs} was accepted")
        assert outcome[0] is error and says in outcome[1], outcome
    assert client.events(conversation_id).last_seq == 0  # nothing written


def test_the_fence_refuses_a_start_read_before_another_write(postgres_client: ChatClient) -> None:
    """The read, then a submit through the general path, then the stale start: it writes
    nothing (no row back), and `submit_message` would take the general path."""
    client = postgres_client
    store = client.loop_store
    assert store is not None
    conversation_id = client.create_conversation(owner="o")
    statements = (store._submit_read, store._start)

    async def stale_start() -> list[Any]:
        async with store.connections.connection() as connection:
            read = quick_submit.seen(
                await statements[0].rows_on_loop(
                    connection, {"conversation_id": conversation_id, "key": None}
                ),
                conversation_id,
                "o",
            )
            assert read.quick and read.event_seq == 0
            await asyncio.to_thread(client.submit_message, conversation_id, "first", owner="o")
            _, parameters = quick_submit.start_parameters(
                conversation_id, read, "late", None, metadata=None, output_schema=None,
                echo=None, trace_context=None, now=datetime.now(UTC),
            )  # fmt: skip
            return await statements[1].rows_on_loop(connection, parameters)

    assert asyncio.run(stale_start()) == []
    page = client.events(conversation_id, limit=100)
    assert page.last_seq == 3 and [m.content for m in client.get_conversation(
        conversation_id).messages] == ["first"]  # fmt: skip


def test_racing_submits_start_one_turn_and_queue_the_rest(
    engine_: Engine, client: ChatClient
) -> None:
    """Eight submits at once to one resting conversation, on one loop (each read sees it at
    rest): one fence matches and starts its turn, the seven others find the fence moved and
    take the general path, which queues them behind it. Every seq is taken once (the
    invariants, checked after the test, say the log has no gap)."""
    conversation_id = client.create_conversation(owner="o")
    offloads = Offloads()
    on_loop = AsyncChatClient(client, offload=offloads)

    async def race() -> list[Submitted]:
        return await asyncio.gather(
            *(
                on_loop.submit_message(
                    conversation_id, f"message {n}", owner="o", on_busy="enqueue"
                )
                for n in range(8)
            )
        )

    submitted = asyncio.run(race())
    started = [s for s in submitted if s.turn.status == "queued" and s.seq is not None]
    waiting = [s for s in submitted if s.seq is None]
    assert len(started) == 1 and len(waiting) == 7
    assert sorted(s.turn.number for s in submitted) == list(range(1, 9))
    if engine_.dialect.name == "postgresql":
        assert offloads.ran.count("submit_message") >= 7  # (the losers: the general path)
    page = client.events(conversation_id, limit=1000)
    assert [e.seq for e in page.events] == list(range(1, page.last_seq + 1))
