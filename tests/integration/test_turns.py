"""Turns and the event log on a real database: what a submit, a worker's run, a recovered crash,
a queued message and the janitor each append, and what every bad input gets (`BAD_INPUTS`, the
table below: each refused with its error and nothing written)."""

from __future__ import annotations

import asyncio
import io
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.errors import (
    ActionNotFound,
    ConversationBusy,
    ConversationNotFound,
    IdempotencyKeyReused,
    InvalidCursor,
    InvalidMessage,
    InvalidRequest,
    MessageTooLarge,
    NotRetryable,
    TurnNotFound,
)
from app.models import Event, Message, Turn
from app.printing import follow, render_event
from app.testing import fakes
from app.worker.janitor import clean_up
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.ports import ModelReply, ModelRequest, Usage
from app.worker.store import TurnStore, Upkeep
from tests.rows import force_status

SETTINGS = load_settings(lease_ttl_seconds=30, heartbeat_seconds=10, max_attempts=3)
ADD_THEN_ANSWER = fakes.by_iteration(
    [fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("It is 3.")]
)


@pytest.fixture
def engine_(any_database_url: str) -> Iterator[Engine]:
    yield from with_the_add_tool(any_database_url)


def with_the_add_tool(url: str) -> Iterator[Engine]:
    """An engine on `url` with the `add` tool published (disposed after)."""
    engine = make_engine(url)
    tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
    asyncio.run(_publish(Upkeep(engine), tools))
    yield engine
    engine.dispose()


async def _publish(upkeep: Upkeep, tools: fakes.InMemoryTools) -> None:
    upkeep.publish_catalog(await tools.definitions())


@pytest.fixture
def client(engine_: Engine) -> ChatClient:
    settings = load_settings(database_url=str(engine_.url))
    return ChatClient(settings, engine=engine_, enqueue=lambda _: None)


def runner(engine: Engine, store: TurnStore | None = None) -> TurnRunner:
    tools = fakes.InMemoryTools({"add": lambda a, b: str(a + b)})
    model = fakes.ScriptedModel(ADD_THEN_ANSWER)
    return TurnRunner(
        store or TurnStore(engine), model=model, tools=tools, settings=SETTINGS, owner="w1"
    )


def run(engine: Engine, conversation_id: uuid.UUID) -> Outcome:
    return asyncio.run(runner(engine).run(conversation_id))


def log(client: ChatClient, conversation_id: uuid.UUID, after: int = 0) -> list[str]:
    """The event log as short strings: the type, and the role, status or attempt it names."""
    described = []
    for event in client.events(conversation_id, after=after, limit=1000).events:
        detail = ""
        if event.message is not None:
            detail = f" {event.message.role}" + (" calls" if event.message.tool_calls else "")
        elif event.status is not None:
            detail = f" {event.status}"
        elif event.attempt is not None and event.type == "turn.resumed":
            detail = f" attempt {event.attempt}"
        described.append(event.type + detail)
    return described


def counts(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as connection:
        return tuple(  # type: ignore[return-value]
            int(connection.execute(select(func.count()).select_from(table)).scalar_one())
            for table in (Turn, Message, Event)
        )


# A conversation with a running turn (`c`, its turn `t`) takes each bad input in turn.
Call = Callable[[ChatClient, uuid.UUID, uuid.UUID], object]
BAD_INPUTS: list[tuple[str, Call, type[Exception], str]] = [
    ("an empty message", lambda cl, c, t: cl.submit_message(c, ""), InvalidMessage, "is empty"),
    ("blank", lambda cl, c, t: cl.submit_message(c, " \n\t"), InvalidMessage, "is empty"),
    ("a NUL", lambda cl, c, t: cl.submit_message(c, "a\x00b"), InvalidMessage, "NUL character"),
    ("not text", lambda cl, c, t: cl.submit_message(c, 7), InvalidMessage, "not int"),
    ("too long", lambda cl, c, t: cl.submit_message(c, "x" * 10**6), MessageTooLarge, "limit"),
    ("while busy", lambda cl, c, t: cl.submit_message(c, "b"), ConversationBusy, "is running"),
    ("a bad on_busy", lambda cl, c, t: cl.submit_message(c, "b", on_busy="later"),
     InvalidRequest, "on_busy must be one of"),
    ("a bad key", lambda cl, c, t: cl.submit_message(c, "b", idempotency_key=""),
     InvalidRequest, "idempotency_key must be a string of 1 to 200"),
    ("no such conversation", lambda cl, c, t: cl.submit_message(uuid.uuid4(), "b"),
     ConversationNotFound, "no conversation"),
    ("another owner's", lambda cl, c, t: cl.submit_message(c, "b", owner="mallory"),
     ConversationNotFound, "no conversation"),
    ("a retry of a running one", lambda cl, c, t: cl.retry_conversation(c), NotRetryable,
     "only a failed one can be retried"),
    ("a retry of nothing", lambda cl, c, t: cl.retry_conversation(uuid.uuid4()),
     ConversationNotFound, "no conversation"),
    ("no answers", lambda cl, c, t: cl.answer_actions(t, {}), InvalidRequest, "non-empty"),
    ("an answer nobody asked for", lambda cl, c, t: cl.answer_actions(t, {"c1": "x"}),
     ActionNotFound, "waits for no call 'c1'"),
    ("an answer to no turn", lambda cl, c, t: cl.answer_actions(uuid.uuid4(), {"c1": "x"}),
     TurnNotFound, "no turn"),
    ("a cancel of no turn", lambda cl, c, t: cl.cancel_turn(uuid.uuid4()), TurnNotFound,
     "no turn"),
    ("a cancel of another owner's", lambda cl, c, t: cl.cancel(c, owner="mallory"),
     ConversationNotFound, "no conversation"),
    ("a malformed turn id", lambda cl, c, t: cl.get_turn("turn-42"), TurnNotFound,
     "not a valid id"),
    ("another owner's turn", lambda cl, c, t: cl.get_turn(t, owner="mallory"), TurnNotFound,
     "no turn"),
    ("a malformed conversation id", lambda cl, c, t: cl.current_turn("zz"),
     ConversationNotFound, "not a valid id"),
    ("a negative cursor", lambda cl, c, t: cl.events(c, after=-1), InvalidCursor, ">= 0"),
    ("a cursor past the end", lambda cl, c, t: cl.events(c, after=99), InvalidCursor,
     "beyond the last event"),
    ("a page of none", lambda cl, c, t: cl.events(c, limit=0), InvalidRequest, "limit"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [row[1:] for row in BAD_INPUTS],
    ids=[row[0] for row in BAD_INPUTS],
)
def test_every_bad_input_is_refused_with_its_error_and_writes_nothing(
    client: ChatClient, engine_: Engine, call: Call, error: type[Exception], words: str
) -> None:
    conversation_id = client.create_conversation()
    turn_id = client.submit_message(conversation_id, "hello").turn_id
    assert turn_id is not None
    before = counts(engine_)
    with pytest.raises(error, match=re.escape(words)):
        call(client, conversation_id, turn_id)
    assert counts(engine_) == before


def test_a_turn_with_a_tool_logs_every_step_in_commit_order(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    submitted = client.submit_message(conversation_id, "1 + 2?")
    assert submitted.turn_id is not None and submitted.turn_status == "queued"
    assert log(client, conversation_id) == [
        "turn.queued",
        "message.committed user",
        "status.changed processing",
    ]
    assert run(engine_, conversation_id) is Outcome.IDLE
    assert log(client, conversation_id, after=3) == [
        "turn.started",
        "message.committed assistant calls",
        "status.changed tool_loop",
        "message.committed tool",
        "message.committed assistant",
        "turn.completed",
        "status.changed idle",
    ]
    turn = client.get_turn(submitted.turn_id)
    assert (turn.status, turn.message_seq, turn.error) == ("completed", 1, None)
    assert (turn.prompt_tokens, turn.completion_tokens) == (20, 10)  # two model calls
    assert turn.started_at is not None and turn.finished_at is not None
    page = client.events(conversation_id, after=0, limit=100)
    assert page.last_seq == 10 and page.status == "idle"
    completed = page.events[-2]
    assert completed.turn is not None and completed.turn.status == "completed"


def test_a_recovered_crash_logs_turn_resumed_with_the_attempt(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    client.submit_message(conversation_id, "1 + 2?")
    dead = TurnStore(engine_, clock=lambda: datetime.now(UTC) - timedelta(seconds=120))
    snapshot = dead.claim(conversation_id, "dead-worker", ttl=30)
    assert snapshot is not None and snapshot.first
    assert run(engine_, conversation_id) is Outcome.IDLE
    events = log(client, conversation_id)
    assert events[3:5] == ["turn.started", "turn.resumed attempt 2"]
    assert events.count("turn.completed") == 1


def test_the_same_idempotency_key_and_text_return_the_first_turn_and_write_nothing(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation()
    first = client.submit_message(conversation_id, "hello", idempotency_key="k-1")
    before = counts(engine_)
    again = client.submit_message(conversation_id, "hello", idempotency_key="k-1")
    assert (again.turn_id, again.seq, again.repeated) == (first.turn_id, first.seq, True)
    assert counts(engine_) == before
    # still repeated after the turn ended, and the busy policy is not consulted
    run(engine_, conversation_id)
    assert client.submit_message(conversation_id, "hello", idempotency_key="k-1").repeated


def test_an_idempotency_key_reused_with_another_text_is_refused_and_writes_nothing(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hello", idempotency_key="k-1")
    run(engine_, conversation_id)
    before = counts(engine_)
    with pytest.raises(IdempotencyKeyReused, match="k-1"):
        client.submit_message(conversation_id, "something else", idempotency_key="k-1")
    assert counts(engine_) == before
    # a key is per conversation
    other = client.create_conversation()
    assert not client.submit_message(other, "something else", idempotency_key="k-1").repeated


def test_reject_names_the_running_turn_and_writes_nothing(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation()
    first = client.submit_message(conversation_id, "hello")
    before = counts(engine_)
    with pytest.raises(ConversationBusy, match=str(first.turn_id)) as refused:
        client.submit_message(conversation_id, "again")
    assert refused.value.turn_id == first.turn_id
    assert counts(engine_) == before


def test_enqueued_messages_wait_outside_the_transcript_and_run_in_order(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    first = client.submit_message(conversation_id, "first")
    second = client.submit_message(conversation_id, "second", on_busy="enqueue")
    third = client.submit_message(conversation_id, "third", on_busy="enqueue")
    assert (second.seq, second.enqueued, second.detail) == (None, False, second.detail)
    assert "waits behind" in (second.detail or "")
    view = client.get_conversation(conversation_id)
    assert [m.content for m in view.messages] == ["first"]
    assert [client.get_turn(t.turn_id or uuid.uuid4()).number for t in (second, third)] == [2, 3]
    # One run takes every waiting turn, in order, each started by the claim after the last ended.
    assert run(engine_, conversation_id) is Outcome.IDLE
    view = client.get_conversation(conversation_id)
    assert [(m.role, m.content) for m in view.messages if not (m.tool_calls or m.tool_call_id)] == [
        ("user", "first"),
        ("assistant", "It is 3."),
        ("user", "second"),
        ("assistant", "It is 3."),
        ("user", "third"),
        ("assistant", "It is 3."),
    ]
    assert view.status == "idle"
    for submitted in (first, second, third):
        assert client.get_turn(submitted.turn_id or uuid.uuid4()).status == "completed"
    events = log(client, conversation_id)
    assert events.count("turn.completed") == 3
    assert events.count("status.changed idle") == 1  # it rested only at the end


def test_a_turn_that_fails_hands_over_to_the_waiting_turn(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation()
    first = client.submit_message(conversation_id, "first")
    second = client.submit_message(conversation_id, "second", on_busy="enqueue")
    store = TurnStore(engine_)
    snapshot = store.claim(conversation_id, "w1", ttl=30)
    assert snapshot is not None
    failed = store.fail(snapshot.claim, "the model said no", status=snapshot.status)
    assert failed.status == "processing"  # the waiting turn is next, with no lease
    assert client.get_turn(first.turn_id or uuid.uuid4()).error == "the model said no"
    assert client.get_conversation(conversation_id).error is None
    assert run(engine_, conversation_id) is Outcome.IDLE
    assert client.get_turn(second.turn_id or uuid.uuid4()).status == "completed"


def test_a_retry_is_a_new_turn_and_the_failed_one_stays_failed(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    first = client.submit_message(conversation_id, "1 + 2?")
    force_status(engine_, conversation_id, "failed")
    retried = client.retry_conversation(conversation_id)
    assert retried.turn_id != first.turn_id
    assert run(engine_, conversation_id) is Outcome.IDLE
    assert client.get_turn(first.turn_id or uuid.uuid4()).status == "failed"
    retry = client.get_turn(retried.turn_id or uuid.uuid4())
    assert (retry.kind, retry.status, retry.message_seq) == ("retry", "completed", None)


def test_the_janitor_fails_the_turn_and_logs_it(client: ChatClient, engine_: Engine) -> None:
    conversation_id = client.create_conversation()
    submitted = client.submit_message(conversation_id, "hello")
    force_status(
        engine_,
        conversation_id,
        "processing",
        heartbeat_at=datetime.now(UTC) - timedelta(minutes=10),
    )
    assert len(clean_up(Upkeep(engine_), older_than=300).conversations) == 1
    turn = client.get_turn(submitted.turn_id or uuid.uuid4())
    assert turn.status == "failed" and "No progress" in (turn.error or "")
    assert log(client, conversation_id)[-2:] == ["turn.failed", "status.changed failed"]


def test_current_turn_and_pages_of_events(client: ChatClient, engine_: Engine) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    assert client.current_turn(conversation_id) is None
    submitted = client.submit_message(conversation_id, "1 + 2?")
    run(engine_, conversation_id)
    current = client.current_turn(conversation_id)
    assert current is not None and current.id == submitted.turn_id
    seen, after = [], 0
    while True:
        page = client.events(conversation_id, after=after, limit=3)
        if not page.events:
            break
        seen += [event.seq for event in page.events]
        after = page.next_after or after
    assert seen == list(range(1, 11))
    assert client.events(conversation_id, after=10).events == []


# --- bad input: a clear error, and nothing written ---------------------------------------------


@pytest.mark.parametrize(
    ("after", "limit", "error", "words"),
    [
        (-1, 10, InvalidCursor, "after must be an event seq >= 0"),
        ("3", 10, InvalidCursor, "after must be an event seq"),
        (True, 10, InvalidCursor, "after must be an event seq"),
        (99, 10, InvalidCursor, "beyond the last event"),
        (0, 0, InvalidRequest, "limit must be between 1 and 1000"),
        (0, 1001, InvalidRequest, "limit must be between 1 and 1000"),
    ],
)
def test_a_bad_cursor_is_refused(
    client: ChatClient, after: object, limit: object, error: type[Exception], words: str
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hello")
    with pytest.raises(error, match=words):
        client.events(conversation_id, after=after, limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"idempotency_key": ""}, "idempotency_key must be a string of 1 to 200"),
        ({"idempotency_key": "k" * 201}, "idempotency_key must be a string of 1 to 200"),
        ({"idempotency_key": 7}, "idempotency_key must be a string"),
        ({"idempotency_key": "a\nb"}, "printable"),
        (
            {"on_busy": "queue"},
            "on_busy must be one of reject, enqueue, interrupt, rollback, steer, not 'queue'",
        ),
        ({"on_busy": None}, "on_busy must be one of"),
    ],
)
def test_a_bad_submit_option_is_refused_and_writes_nothing(
    client: ChatClient, engine_: Engine, options: dict[str, object], words: str
) -> None:
    conversation_id = client.create_conversation()
    before = counts(engine_)
    with pytest.raises(InvalidRequest, match=words):
        client.submit_message(conversation_id, "hello", **options)  # type: ignore[arg-type]
    assert counts(engine_) == before


def test_unknown_and_malformed_ids_are_not_found(client: ChatClient) -> None:
    with pytest.raises(TurnNotFound, match="no turn"):
        client.get_turn(uuid.uuid4())
    with pytest.raises(TurnNotFound, match="not a valid id"):
        client.get_turn("turn-42")
    with pytest.raises(ConversationNotFound):
        client.events(uuid.uuid4())
    with pytest.raises(ConversationNotFound):
        client.current_turn(uuid.uuid4())
    with pytest.raises(ConversationNotFound):
        client.submit_message(uuid.uuid4(), "hello", on_busy="enqueue")


def test_a_step_logs_status_changed_only_when_the_status_changes(engine_: Engine) -> None:
    settings = load_settings(database_url=str(engine_.url))
    client = ChatClient(settings, engine=engine_, enqueue=lambda _: None)
    conversation_id = client.create_conversation(tools=["add"])
    client.submit_message(conversation_id, "1 + 2?")
    store = TurnStore(engine_)
    snapshot = store.claim(conversation_id, "w1", ttl=30)
    assert snapshot is not None
    from app.worker.plan import ToolCall

    calls = [ToolCall("c1", "add", '{"a": 1, "b": 2}')]
    step = store.record_tool_calls(
        snapshot.claim,
        status=snapshot.status,
        seq=2,
        parent=1,
        content=None,
        calls=calls,
        usage=Usage(1, 1),
        ttl=30,
    )
    assert step.status == "tool_loop"
    result = store.record_tool_result(
        snapshot.claim,
        status="tool_loop",
        seq=3,
        parent=2,
        call=calls[0],
        content="3",
        is_error=False,
        ttl=30,
    )
    assert result.status == "tool_loop"
    assert log(client, conversation_id)[-3:] == [
        "message.committed assistant calls",
        "status.changed tool_loop",
        "message.committed tool",
    ]


def test_follow_prints_every_status_and_resumes_after_any_event(
    client: ChatClient, engine_: Engine
) -> None:
    conversation_id = client.create_conversation(tools=["add"])
    client.submit_message(conversation_id, "1 + 2?")
    run(engine_, conversation_id)
    whole = io.StringIO()
    follow(client, conversation_id, whole)
    lines = whole.getvalue().splitlines()
    assert [line for line in lines if line.startswith("[")] == [
        "[processing]",
        "[tool_loop]",
        "[idle]",
    ]
    # Stopped after event k and resumed with after=k: the same lines, none twice.
    for k in range(client.events(conversation_id).last_seq + 1):
        rest = io.StringIO()
        printed = [
            line
            for event in client.events(conversation_id, after=0, limit=k or 1).events[:k]
            if (line := render_event(event)) is not None
        ]
        follow(client, conversation_id, rest, after=k)
        assert printed + rest.getvalue().splitlines() == lines, k


def test_a_message_queued_while_the_final_answer_waits_for_the_row_is_not_forgotten(
    database_url: str,
) -> None:
    """The race the hand-over must survive: a submit (`enqueue`) holds the conversation's row
    when the worker's final statement comes; that statement waits for the row, then runs on the
    submit's version of it. It must hand over to the new turn, not rest `idle` with the turn
    forgotten (it decides from the row's counters: a subquery would still see its older
    snapshot, without the new turn)."""
    engine = make_engine(database_url, pool_size=8, max_overflow=2)
    asyncio.run(_publish(Upkeep(engine), fakes.InMemoryTools({"add": lambda a, b: str(a + b)})))
    settings = load_settings(database_url=database_url)
    client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "first")
    asked, answer_now = threading.Event(), threading.Event()

    def respond(request: ModelRequest) -> ModelReply:
        asked.set()
        answer_now.wait(30)  # in a thread: the worker's loop keeps running
        return fakes.text(f"re: {request.messages[-1]['content']}")

    async def slow(request: ModelRequest) -> ModelReply:
        return await asyncio.to_thread(respond, request)

    worker = TurnRunner(
        TurnStore(engine),
        model=fakes.ScriptedModel(slow),
        tools=fakes.InMemoryTools({}),
        settings=SETTINGS,
        owner="w1",
    )
    outcome: list[Outcome] = []
    running = threading.Thread(
        target=lambda: outcome.append(asyncio.run(worker.run(conversation_id)))
    )
    running.start()
    try:
        assert asked.wait(30)  # the worker holds the turn and waits on the model
        with engine.begin() as connection:  # the submit, not committed yet
            from app.client import intake

            queued = intake.submit(
                connection, conversation_id, "second", idempotency_key=None, on_busy="enqueue"
            )
            answer_now.set()
            _wait_for_a_lock_wait(database_url)  # the final answer's statement waits for the row
        running.join(30)
    finally:
        answer_now.set()
        running.join(30)
        engine.dispose()
    assert outcome == [Outcome.IDLE]
    view = client.get_conversation(conversation_id)
    assert [m.content for m in view.messages] == ["first", "re: first", "second", "re: second"]
    assert client.get_turn(queued.id).status == "completed"


def _wait_for_a_lock_wait(database_url: str, timeout: float = 20) -> None:
    import psycopg

    from app.testing.services import libpq_dsn

    deadline = time.monotonic() + timeout
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the worker's statement never waited for the row")
