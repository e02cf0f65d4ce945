"""The web-app client: what each request gets, and that a refused request writes nothing.

| bad input                                   | outcome                                  |
|---------------------------------------------|------------------------------------------|
| message while `processing` / `tool_loop`     | ConversationBusy, nothing written        |
| empty / whitespace / oversized / NUL / non-str text | InvalidMessage, nothing written   |
| unknown or malformed conversation id        | ConversationNotFound                     |
| unknown tool name (catalogue empty or not)  | UnknownTool naming it (and what exists)  |
| bad tool_choice, 'required' without tools   | InvalidRequest                           |
| context not a JSON object                   | InvalidRequest                           |
| retry of a conversation that has not failed | NotRetryable                             |
| queue unreachable after the commit          | Submitted(enqueued=False), message kept  |
| no `REDIS_URL` and no `enqueue=`            | Submitted(enqueued=False, detail naming  |
|                                             | REDIS_URL), message kept, nothing queued |
| settings with a `REDIS_URL` other than the  | the doorbell goes to the client's Redis  |
| environment's                               |                                          |
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

from app.client import (
    AdminClient,
    AsyncAdminClient,
    AsyncChatClient,
    ChatClient,
    ConversationView,
)
from app.client.inline import Blocking
from app.config import load_settings
from app.db import make_engine
from app.errors import (
    ConversationBusy,
    ConversationNotFound,
    InvalidMessage,
    InvalidRequest,
    NotRetryable,
    UnknownTool,
)
from app.models import Conversation, Message
from app.queue import QUEUE_NAME
from app.worker.ports import ToolDefinition
from app.worker.store import Upkeep
from tests.rows import force_status

LIMIT = 1000
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    Upkeep(engine).publish_catalog(
        [ToolDefinition(n, f"{n} tool", {"type": "object"}, "srv", n) for n in ("add", "search")]
    )
    yield engine
    engine.dispose()


@pytest.fixture
def rung() -> list[uuid.UUID]:
    return []


@pytest.fixture
def client(engine: Engine, database_url: str, rung: list[uuid.UUID]) -> ChatClient:
    settings = load_settings(database_url=database_url, max_message_chars=LIMIT)
    return ChatClient(settings, engine=engine, enqueue=rung.append)


def counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as connection:
        conversations = connection.execute(select(func.count()).select_from(Conversation)).scalar()
        messages = connection.execute(select(func.count()).select_from(Message)).scalar()
    return int(conversations or 0), int(messages or 0)


def test_create_submit_and_poll(client: ChatClient, rung: list[uuid.UUID]) -> None:
    conversation_id = client.create_conversation(
        model="openai/gpt-4o-mini", instructions="Be brief.", tools=["add"], context={"user": 42}
    )
    view = client.get_conversation(conversation_id)
    assert (view.status, view.model, view.messages) == ("idle", "openai/gpt-4o-mini", [])
    submitted = client.submit_message(conversation_id, "hello")
    assert (submitted.seq, submitted.enqueued, rung) == (1, True, [conversation_id])
    view = client.get_conversation(str(conversation_id))
    assert view.status == "processing" and view.is_running
    assert [(m.seq, m.role, m.content) for m in view.messages] == [(1, "user", "hello")]
    assert client.get_conversation(conversation_id, after_seq=1).messages == []
    assert view.cursor() == 1


@pytest.mark.parametrize(
    "context",
    [None, {}, {"user": 42, "tags": ["a", "b"], "page": {"id": None, "title": "Caf\u00e9 \u2603"}}],
)
def test_the_context_reads_back_as_it_was_given(
    client: ChatClient, context: dict[str, Any] | None
) -> None:
    conversation_id = client.create_conversation(context=context)
    assert client.get_conversation(conversation_id).context == context


def test_the_view_shows_how_the_conversation_was_set_up(client: ChatClient) -> None:
    conversation_id = client.create_conversation(
        instructions="Be brief.", tools=["search", "add", "search"], tool_choice="required"
    )
    view = client.get_conversation(conversation_id)
    assert view.instructions == "Be brief."
    assert view.tools == ["search", "add"]  # as stored: duplicates dropped, order kept
    assert view.tool_choice == "required"


def test_the_setup_of_a_conversation_has_defaults(client: ChatClient) -> None:
    view = client.get_conversation(client.create_conversation())
    assert view.instructions is None and view.tools == [] and view.context is None
    assert view.tool_choice == "auto"


def test_the_default_model_comes_from_the_settings(client: ChatClient) -> None:
    conversation_id = client.create_conversation()
    assert client.get_conversation(conversation_id).model == "demo/offline"


@pytest.mark.parametrize("status", ["processing", "tool_loop"])
def test_a_message_to_a_busy_conversation_is_refused_and_writes_nothing(
    client: ChatClient, engine: Engine, rung: list[uuid.UUID], status: str
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "first")
    force_status(engine, conversation_id, status)
    before = counts(engine)
    with pytest.raises(ConversationBusy, match=f"is {status}"):
        client.submit_message(conversation_id, "second")
    assert counts(engine) == before
    assert len(rung) == 1
    assert client.get_conversation(conversation_id).status == status


def test_a_failed_conversation_accepts_a_new_message(client: ChatClient, engine: Engine) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "first")
    force_status(engine, conversation_id, "failed")
    assert client.submit_message(conversation_id, "again").seq == 2
    assert client.get_conversation(conversation_id).error is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("   \n\t", "is empty"),
        ("x" * (LIMIT + 1), f"the limit is {LIMIT}"),
        ("a\x00b", "NUL"),
        (b"bytes", "must be a string"),
        (None, "must be a string"),
    ],
)
def test_bad_message_text_is_refused_and_writes_nothing(
    client: ChatClient, engine: Engine, text: object, message: str
) -> None:
    conversation_id = client.create_conversation()
    before = counts(engine)
    with pytest.raises(InvalidMessage, match=message):
        client.submit_message(conversation_id, text)  # type: ignore[arg-type]
    assert counts(engine) == before
    assert client.get_conversation(conversation_id).status == "idle"


def test_a_message_of_exactly_the_limit_is_accepted(client: ChatClient) -> None:
    conversation_id = client.create_conversation()
    assert client.submit_message(conversation_id, "x" * LIMIT).seq == 1


@pytest.mark.parametrize("bad_id", [uuid.UUID(int=1), str(uuid.UUID(int=2)), "not-a-uuid", ""])
def test_unknown_conversation_ids(client: ChatClient, bad_id: object) -> None:
    with pytest.raises(ConversationNotFound):
        client.submit_message(bad_id, "hi")  # type: ignore[arg-type]
    with pytest.raises(ConversationNotFound):
        client.get_conversation(bad_id)  # type: ignore[arg-type]
    with pytest.raises(ConversationNotFound):
        client.retry_conversation(bad_id)  # type: ignore[arg-type]


def test_an_unknown_tool_name_is_refused_naming_what_exists(
    client: ChatClient, engine: Engine
) -> None:
    before = counts(engine)
    with pytest.raises(UnknownTool, match=r"unknown tool.*nope.*available: add, search"):
        client.create_conversation(tools=["add", "nope"])
    assert counts(engine) == before


def test_tool_names_are_checked_even_before_any_worker_published(
    database_url: str, rung: list[uuid.UUID]
) -> None:
    engine = make_engine(database_url)  # a database whose catalogue is empty
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=rung.append
    )
    with pytest.raises(UnknownTool, match="no worker has published its tools yet"):
        client.create_conversation(tools=["add"])
    engine.dispose()


def test_tool_choice_required_is_met_by_a_client_tool_alone(client: ChatClient) -> None:
    """A client's function tool is a tool: `required` with no server tool but one client tool is
    accepted (a structured-output framework sends exactly that)."""
    tool = {"name": "final_result", "description": "The answer.", "parameters": {}}
    conversation_id = client.create_conversation(tool_choice="required", client_tools=[tool])
    view = client.get_conversation(conversation_id)
    assert (view.tool_choice, [t["name"] for t in view.client_tools]) == (
        "required",
        ["final_result"],
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tool_choice": "always"}, "tool_choice must be one of"),
        ({"tool_choice": "required"}, "needs at least one tool"),
        ({"tools": "add"}, "list of tool names"),
        ({"tools": [""]}, "list of tool names"),
        ({"model": ""}, "model must be"),
        ({"model": "m" * 201}, "model must be"),
        ({"context": ["not", "a", "dict"]}, "context must be a JSON object"),
        ({"context": {"when": object()}}, "JSON-serializable"),
        ({"instructions": "x" * (LIMIT + 1)}, "the limit is"),
    ],
)
def test_bad_conversation_options_are_refused(
    client: ChatClient, engine: Engine, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        client.create_conversation(**options)  # type: ignore[arg-type]
    assert counts(engine) == (0, 0)


@pytest.mark.parametrize("status", ["idle", "processing", "tool_loop"])
def test_only_a_failed_conversation_can_be_retried(
    client: ChatClient, engine: Engine, status: str
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    force_status(engine, conversation_id, status)
    with pytest.raises(NotRetryable, match=f"is {status}"):
        client.retry_conversation(conversation_id)
    assert client.get_conversation(conversation_id).status == status


def test_retry_of_a_failed_conversation_restarts_the_turn(
    client: ChatClient, engine: Engine, rung: list[uuid.UUID]
) -> None:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    force_status(engine, conversation_id, "failed")
    submitted = client.retry_conversation(conversation_id)
    # A retry is a new turn with no message of its own.
    assert (submitted.seq, submitted.enqueued, submitted.turn_status) == (None, True, "queued")
    assert client.get_turn(submitted.turn_id or uuid.uuid4()).kind == "retry"
    assert rung == [conversation_id, conversation_id]
    assert client.get_conversation(conversation_id).status == "processing"


def test_an_unreachable_queue_keeps_the_message_and_says_so(
    engine: Engine, database_url: str
) -> None:
    def broken_queue(_: uuid.UUID) -> None:
        raise ConnectionError("Redis is down")

    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=broken_queue
    )
    conversation_id = client.create_conversation()
    submitted = client.submit_message(conversation_id, "are you there?")
    assert submitted.enqueued is False
    assert "recovery sweep" in (submitted.detail or "")
    view = client.get_conversation(conversation_id)
    assert view.status == "processing"
    assert [m.content for m in view.messages] == ["are you there?"]


def test_without_redis_url_or_enqueue_the_message_is_kept_and_the_detail_says_why(
    engine: Engine, database_url: str
) -> None:
    client = ChatClient(load_settings(database_url=database_url, redis_url=None), engine=engine)
    conversation_id = client.create_conversation()
    submitted = client.submit_message(conversation_id, "anyone there?")
    assert (submitted.seq, submitted.enqueued) == (1, False)
    assert "REDIS_URL" in (submitted.detail or "")
    assert "saved" in (submitted.detail or "") and "recovery sweep" in (submitted.detail or "")
    view = client.get_conversation(conversation_id)
    assert view.status == "processing"
    assert [m.content for m in view.messages] == ["anyone there?"]
    force_status(engine, conversation_id, "failed")
    retried = client.retry_conversation(conversation_id)
    assert (retried.enqueued, retried.detail) == (False, submitted.detail)


def test_without_redis_url_or_enqueue_nothing_is_put_on_the_process_broker(
    database_url: str, tmp_path: Path
) -> None:
    """A web-app process as a new user starts it: no REDIS_URL. Its broker (an in-process one
    that no worker reads) must stay empty instead of swallowing the doorbell."""
    code = (
        "from app.client import ChatClient\n"
        "from app.queue import get_broker\n"
        "client = ChatClient()\n"
        "submitted = client.submit_message(client.create_conversation(), 'hi')\n"
        "broker = get_broker()\n"
        "print(submitted.enqueued, type(broker).__name__, "
        "sum(q.qsize() for q in broker.queues.values()))\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": database_url,
    }
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.stdout.split() == ["False", "StubBroker", "0"], result.stderr


def test_a_client_rings_the_queue_at_its_own_redis_url(
    engine: Engine, database_url: str, redis_url: str
) -> None:
    """Settings given to the client, not the environment's (this process has no REDIS_URL): the
    doorbell must reach the Redis they name, not this process's in-process broker."""
    assert "REDIS_URL" not in os.environ
    settings = load_settings(database_url=database_url, redis_url=redis_url)
    client = ChatClient(settings, engine=engine)
    conversation_id = client.create_conversation()
    try:
        assert client.submit_message(conversation_id, "ring me").enqueued
    finally:
        client.close()
    queued = redis.Redis.from_url(redis_url)
    with contextlib.closing(queued):
        messages = [json.loads(m) for m in queued.hvals(f"dramatiq:{QUEUE_NAME}.msgs")]
    assert [m["args"] for m in messages] == [[str(conversation_id)]]


def test_the_async_client_does_the_same(client: ChatClient, rung: list[uuid.UUID]) -> None:
    async def scenario() -> None:
        async_client = AsyncChatClient(client)
        conversation_id = await async_client.create_conversation(tools=["search"])
        submitted = await async_client.submit_message(conversation_id, "hi")
        assert submitted.enqueued
        view = await async_client.get_conversation(conversation_id)
        assert view.status == "processing"
        with pytest.raises(ConversationBusy):
            await async_client.submit_message(conversation_id, "again")
        # the operator's calls are the admin client's, as coroutines over the same engine
        tools = await async_client.admin.list_tools()
        assert [t.name for t in tools] == ["add", "search"]
        key, secret = await async_client.admin.create_key("alice", "laptop")
        assert await async_client.admin.owner_of_key(secret) == "alice"
        assert [k.id for k in await async_client.admin.list_keys("alice")] == [key.id]
        ready = await async_client.admin.check_ready()
        assert ready["database"] == "ok"

    asyncio.run(scenario())
    assert len(rung) == 1


def test_the_blocking_client_works_in_a_thread_that_runs_an_event_loop(
    client: ChatClient, rung: list[uuid.UUID]
) -> None:
    """A `ChatClient` call runs in the calling thread and never touches an event loop: inside a
    coroutine it works (blocking that loop for its while, as any blocking call does), and so
    does following to a timeout."""

    async def inside() -> ConversationView:
        conversation_id = client.create_conversation(tools=["search"])
        client.submit_message(conversation_id, "hi")
        following = client.follow(conversation_id, until=None, timeout=0.2, poll_interval=0.1)
        with pytest.raises(TimeoutError):
            list(following)
        return client.get_conversation(conversation_id)

    assert asyncio.run(inside()).status == "processing"
    assert len(rung) == 1


@pytest.mark.parametrize(
    ("sync_class", "async_class"),
    [(ChatClient, AsyncChatClient), (AdminClient, AsyncAdminClient)],
    ids=["chat", "admin"],
)
def test_every_method_of_the_client_is_derived_from_its_async_twin(
    sync_class: type, async_class: type
) -> None:
    """Every public coroutine of the async client is a method of the blocking one made by
    `blocking` from it (so their signatures match by construction, and mypy checks the calls):
    the same parameters and result (`follow`: the blocking iterator). The reads a follower makes
    with the offload it is driven with (an `offload` parameter) are not the client's calls."""
    asynchronous = {
        name: method
        for name, method in inspect.getmembers(async_class, inspect.iscoroutinefunction)
        if not name.startswith("_") and "offload" not in _parameters(method)
    }
    derived = {name for name, value in vars(sync_class).items() if isinstance(value, Blocking)}
    assert sorted(derived) == sorted(asynchronous)
    for name in derived:
        mine, twin = (
            inspect.signature(getattr(sync_class, name)),
            inspect.signature(asynchronous[name]),
        )
        assert list(mine.parameters.values()) == list(twin.parameters.values()), name
        expected = "Following" if name == "follow" else twin.return_annotation
        assert mine.return_annotation == expected, name
        assert getattr(sync_class, name).__doc__ == asynchronous[name].__doc__, name


def _parameters(method: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(method).parameters)


def test_the_client_module_does_not_import_litellm() -> None:
    code = (
        "import app.client, app.queue, sys; print('litellm' in sys.modules, 'mcp' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False False", result.stderr
