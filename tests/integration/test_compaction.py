"""Conversations that never outgrow the model: the context budget and durable compaction, against
the fake LLM server enforcing a window the way providers do (a real tokenizer's count, the real
400 bodies of both wire formats), through the real litellm client, on PostgreSQL and SQLite.

What each input that cannot fit gets:

| input                                                     | what happens                         |
|-----------------------------------------------------------|--------------------------------------|
| a conversation growing past the threshold                 | compacted (earlier outputs elided,   |
|                                                           | then the oldest messages summarised) |
| the provider's own overflow error (window unknown here)   | compacted, then the call is retried  |
|                                                           | once; the window it stated is learnt |
| compaction off and the provider's overflow                | the turn fails: "... compaction is   |
|                                                           | off (CHATWORKER_COMPACTION=false..." |
| a user message larger than the whole window               | the turn fails before any call:      |
|                                                           | "... no longer fits ... even         |
|                                                           | compacted"                           |
| a `context_policy` with an unknown key or a bad value     | InvalidRequest naming the key,       |
|                                                           | nothing written                      |
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.errors import InvalidRequest
from app.models import CONTEXT_COMPACTED, Compaction
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.testing.fake_llm.tokens import count_prompt
from app.worker import summary
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.llm import LiteLLMClient
from app.worker.store import Snapshot
from tests.integration.test_loop import CONFIG, World
from tests.integration.test_user_in_the_loop import world_of

WINDOW = 6_000
# The tool's output: 12,000 characters of JSON records, 4,256 tokens of o200k_base (the context
# holds its first 10,000 characters, 3,547 tokens, and the session cache the rest).
OUTPUT = json.dumps(
    [
        {
            "invoice": f"INV-{n:05d}",
            "customer": ["Acme Corp", "Globex", "Initech", "Umbrella"][n % 4],
            "amount": round(n * 13.37 % 900, 2),
            "status": ["paid", "open", "overdue"][n % 3],
        }
        for n in range(200)
    ]
)[:12_000]
SUMMARY = "The user asked for page after page of the report; each fetch returned its text."
FORMATS = {"openai": "openai/fake-small", "anthropic": "anthropic/fake-small"}


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    tools = fakes.InMemoryTools(
        {"fetch": lambda page=0: OUTPUT}, annotations={"fetch": {"readOnlyHint": True}}
    )
    yield from world_of(any_database_url, tools)


def script(llm: FakeLLMServer, window: int | None = WINDOW) -> None:
    """The model fetches a page, then answers; the summaries come from their own script."""
    llm.script(
        [
            {"tool_calls": [{"id": "call_fetch", "name": "fetch", "arguments": {"page": 1}}]},
            {"text": "Here is what the page says."},
        ],
        mode="by_iteration",
        context_window=window,
    )
    llm.script([], match=summary.MARKER, default={"text": SUMMARY}, context_window=window)


def runner(world: World, llm: FakeLLMServer, model: str, **settings: Any) -> TurnRunner:
    base = llm.anthropic_base if model.startswith("anthropic/") else llm.api_base
    client = LiteLLMClient(timeout=10, api_base=base, api_key="sk-test")
    return TurnRunner(
        world.store,
        model=client,
        tools=world.tools,
        settings=CONFIG.model_copy(update=settings),
        owner="worker-1",
    )


def turn(world: World, worker: TurnRunner, conversation_id: uuid.UUID, text: str) -> Outcome:
    world.client.submit_message(conversation_id, text)
    outcome = asyncio.run(worker.run(conversation_id))
    if outcome is Outcome.FAILED:
        print("failed:", world.client.get_conversation(conversation_id).error)
    return outcome


def compactions(world: World, conversation_id: uuid.UUID) -> list[Compaction]:
    from sqlalchemy.orm import Session

    with Session(world.engine) as session:
        query = select(Compaction).where(Compaction.conversation_id == conversation_id)
        return list(session.scalars(query.order_by(Compaction.number)))


def windowed(
    world: World, llm: FakeLLMServer, wire: str = "openai", **policy: Any
) -> tuple[uuid.UUID, TurnRunner]:
    """The model's script, a conversation of `wire`'s model with `policy`, and a worker."""
    script(llm)
    model = FORMATS[wire]
    conversation_id = world.client.create_conversation(
        model=model, tools=["fetch"], context_policy=policy or None
    )
    return conversation_id, runner(world, llm, model)


def refused(llm: FakeLLMServer) -> list[dict[str, Any]]:
    """The requests the model refused (too long for its window)."""
    return [r for r in llm.requests() if (r["step"] or {}).get("error")]


def until_summarised(world: World, worker: TurnRunner, conversation_id: uuid.UUID) -> None:
    """Turns, until one of them committed a summary."""
    n = 0
    while not any(row.kind == "summary" for row in compactions(world, conversation_id)):
        assert turn(world, worker, conversation_id, f"Fetch page {n}.") is Outcome.IDLE
        n += 1


def sent(llm: FakeLLMServer) -> list[dict[str, Any]]:
    """The bodies of the requests the model was sent (summaries included)."""
    return [r["body"] for r in llm.requests() if r["body"] is not None]


@pytest.mark.parametrize("wire", FORMATS)
def test_a_long_conversation_with_large_outputs_never_outgrows_the_window(
    world: World, fake_llm: FakeLLMServer, wire: str
) -> None:
    model = FORMATS[wire]
    conversation_id, worker = windowed(world, fake_llm, wire, window=WINDOW)
    turns = 30
    for n in range(turns):
        assert turn(world, worker, conversation_id, f"Fetch page {n} please.") is Outcome.IDLE

    view = world.client.get_conversation(conversation_id)
    assert view.status == "idle"
    assert len(view.messages) == 4 * turns  # the transcript stays whole
    assert refused(fake_llm) == []  # never once over the window
    rows = compactions(world, conversation_id)
    kinds = {row.kind for row in rows}
    assert kinds == {"elide", "summary"}
    assert [row.number for row in rows] == list(range(1, len(rows) + 1))
    for row in rows:
        assert row.reason == "threshold"
        assert row.tokens_after < row.tokens_before
        assert row.from_seq <= row.through_seq
    summaries = [row for row in rows if row.kind == "summary"]
    assert all(row.summary == SUMMARY and row.model == model for row in summaries)
    assert summaries[-1].prompt_tokens > 0  # the summary's call is counted
    # What the model is sent at the end: the summary, then recent messages only.
    last = [body for body in sent(fake_llm) if summary.MARKER not in str(body)][-1]
    assert SUMMARY in str(last.get("system") or last["messages"][0])
    assert count_prompt(last) <= WINDOW
    events = [
        e for e in world.client.events(conversation_id, limit=1000).events
        if e.type == CONTEXT_COMPACTED
    ]  # fmt: skip
    assert [e.data["number"] for e in events if e.data] == [row.number for row in rows]
    assert [e.message_seq for e in events] == [row.through_seq for row in rows]


def test_with_compaction_off_the_turn_that_passes_the_window_fails_saying_so(
    world: World, fake_llm: FakeLLMServer
) -> None:
    conversation_id, worker = windowed(world, fake_llm, window=WINDOW, compaction=False)
    assert turn(world, worker, conversation_id, "Fetch page 1.") is Outcome.IDLE
    assert turn(world, worker, conversation_id, "Fetch page 2.") is Outcome.FAILED
    (over,) = refused(fake_llm)
    assert count_prompt(over["body"]) > WINDOW  # it passed the window there
    error = world.client.get_conversation(conversation_id).error or ""
    assert "larger than the model's context window" in error
    assert "maximum context length is 6000 tokens" in error
    assert "CHATWORKER_COMPACTION=false" in error
    assert compactions(world, conversation_id) == []
    # The setting does the same for every conversation.
    script(fake_llm)
    model = FORMATS["openai"]
    other = world.client.create_conversation(model=model, tools=["fetch"])
    off = runner(world, fake_llm, model, compaction=False)
    outcomes = [turn(world, off, other, f"Fetch page {n}.") for n in range(2)]
    assert outcomes == [Outcome.IDLE, Outcome.FAILED]


@pytest.mark.parametrize("wire", FORMATS)
def test_the_provider_s_overflow_compacts_and_retries_once(
    world: World, fake_llm: FakeLLMServer, wire: str
) -> None:
    """No window is known for the model: its first overflow error says it, the turn compacts
    and the call is tried again, and from then on the budget keeps it under."""
    script(fake_llm)
    model = FORMATS[wire].replace("small", f"unknown-{uuid.uuid4().hex[:8]}")
    conversation_id = world.client.create_conversation(model=model, tools=["fetch"])
    worker = runner(world, fake_llm, model)
    for n in range(6):
        assert turn(world, worker, conversation_id, f"Fetch page {n}.") is Outcome.IDLE
    assert len(refused(fake_llm)) == 1  # once: then the stated window was learnt
    rows = compactions(world, conversation_id)
    assert rows[0].reason == "overflow"
    assert rows[0].window == WINDOW
    assert all(row.reason == "threshold" for row in rows[1:])


def test_a_message_larger_than_the_whole_window_fails_before_any_call(
    world: World, fake_llm: FakeLLMServer
) -> None:
    conversation_id, worker = windowed(world, fake_llm, window=WINDOW)
    huge = "Please read all of this: " + "lorem ipsum dolor sit amet " * 3_000
    assert turn(world, worker, conversation_id, huge) is Outcome.FAILED
    error = world.client.get_conversation(conversation_id).error or ""
    assert "no longer fits the model's context window of 6,000 tokens" in error
    assert fake_llm.requests() == []


def test_a_claim_sends_by_the_committed_summary(world: World, fake_llm: FakeLLMServer) -> None:
    """The next claim reads the latest compaction: its transcript sends the summary and leaves
    the range out, without asking the model for it again (one summary request per row)."""
    conversation_id, worker = windowed(world, fake_llm, window=WINDOW)
    until_summarised(world, worker, conversation_id)
    world.client.submit_message(conversation_id, "One more page.")
    snapshot = world.store.claim(conversation_id, "worker-2", 30)
    assert isinstance(snapshot, Snapshot)
    latest = compactions(world, conversation_id)[-1]
    assert snapshot.transcript.compacted.number == latest.number
    assert snapshot.transcript.compacted.summarized_through == latest.summarized_through
    sent_now = snapshot.transcript.provider_messages()
    assert SUMMARY in sent_now[0]["content"]
    assert len(sent_now) < len(snapshot.transcript)
    world.store.release(snapshot.claim)
    assert asyncio.run(worker.run(conversation_id)) is Outcome.IDLE
    rows = [row for row in compactions(world, conversation_id) if row.kind == "summary"]
    assert len(fake_llm.requests(match=summary.MARKER)) == len(rows)


def test_the_summary_model_writes_the_summaries(world: World, fake_llm: FakeLLMServer) -> None:
    """`context_policy.summary_model` (or CHATWORKER_COMPACTION_MODEL): the summary requests go
    to that model, the turns' own calls to the conversation's."""
    conversation_id, worker = windowed(
        world, fake_llm, window=WINDOW, summary_model="openai/fake-summarizer"
    )
    until_summarised(world, worker, conversation_id)
    asked = [r["body"]["model"] for r in fake_llm.requests(match=summary.MARKER)]
    assert asked and set(asked) == {"fake-summarizer"}
    others = {r["body"]["model"] for r in fake_llm.requests() if summary.MARKER not in str(r)}
    assert others == {"fake-small"}
    assert {row.model for row in compactions(world, conversation_id) if row.kind == "summary"} == {
        "openai/fake-summarizer"
    }


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ({"windoww": 10}, "unknown key 'windoww'"),
        ({"window": "big"}, "context_policy.window must be a int"),
        ({"window": 10}, "context_policy.window must be at least 256"),
        ({"threshold": 1.5}, "context_policy.threshold must be from 0.1 to 1"),
        ({"compaction": "no"}, "context_policy.compaction must be a bool"),
        ({"summary_model": " "}, "context_policy.summary_model must not be empty"),
        ([1], "context_policy must be an object"),
    ],
)
def test_a_bad_context_policy_is_refused_and_nothing_is_written(
    world: World, policy: Any, named: str
) -> None:
    before = world.client.list_conversations().conversations
    with pytest.raises(InvalidRequest, match=named):
        world.client.create_conversation(tools=["fetch"], context_policy=policy)
    assert world.client.list_conversations().conversations == before


def test_a_compaction_follows_the_path_it_was_made_on(
    world: World, fake_llm: FakeLLMServer
) -> None:
    """An edit before a summary's range leaves the summary on the old branch: the new path is
    sent whole; switching back sends by the summary again; new compactions number on."""
    conversation_id, worker = windowed(world, fake_llm, window=WINDOW)
    until_summarised(world, worker, conversation_id)
    made = compactions(world, conversation_id)
    world.client.edit_message(conversation_id, 1, "Fetch page 99.")
    snapshot = world.store.claim(conversation_id, "worker-2", 30)
    assert isinstance(snapshot, Snapshot)
    assert snapshot.transcript.compacted.summarized_through == 0  # not this path's
    assert snapshot.transcript.compacted.number == made[-1].number  # (the next is past it)
    assert SUMMARY not in str(snapshot.transcript.provider_messages())
    world.store.release(snapshot.claim)
    assert asyncio.run(worker.run(conversation_id)) is Outcome.IDLE
    path = world.client.get_conversation(conversation_id).messages
    assert path[0].content == "Fetch page 99."
    # back on the summarised branch: its summary is sent again, and never asked for again
    world.client.switch_branch(conversation_id, 1)
    world.client.submit_message(conversation_id, "One more page.")
    again = world.store.claim(conversation_id, "worker-3", 30)
    assert isinstance(again, Snapshot)
    assert again.transcript.compacted.summarized_through == made[-1].summarized_through
    assert SUMMARY in again.transcript.provider_messages()[0]["content"]
    world.store.release(again.claim)
    asked = len(fake_llm.requests(match=summary.MARKER))
    assert asyncio.run(worker.run(conversation_id)) is Outcome.IDLE
    rows = compactions(world, conversation_id)
    assert [row.number for row in rows] == list(range(1, len(rows) + 1))
    assert len(fake_llm.requests(match=summary.MARKER)) - asked == sum(
        1 for row in rows[len(made) :] if row.kind == "summary"
    )
