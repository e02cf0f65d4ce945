"""Budgets: per conversation and per owner, in tokens or US dollars, in total or per UTC day;
checked by the worker before each model call against the committed totals (so a crash cannot
reset them) and by the web side before it accepts a message. On PostgreSQL and SQLite, with
in-process model and tools; the HTTP answer (429 `budget_exceeded`) at the bottom.

What each bad budget gets (`InvalidRequest`, nothing written):

| call                                                   | refusal                              |
|--------------------------------------------------------|--------------------------------------|
| neither an owner nor a conversation, or both           | "give exactly one"                   |
| no max_tokens and no max_cost_usd                      | "needs max_tokens, max_cost_usd"     |
| max_tokens negative, a float or a bool                 | "max_tokens must be a whole number"  |
| max_cost_usd negative, not a number, NaN or infinite   | "max_cost_usd must be a number"      |
| a period other than total or day                       | "period must be one of total, day"   |
| an unknown conversation                                | `ConversationNotFound`               |
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.budgets import store as budgets
from app.errors import BudgetExceeded, ConversationNotFound, InvalidRequest
from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.ports import ModelReply
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def priced(reply: ModelReply, cost: float | None) -> ModelReply:
    return replace(reply, usage=replace(reply.usage, cost_usd=cost))


ADD = fakes.calls(("c1", "add", {"a": 1, "b": 2}))  # 15 tokens a call (10 + 5)


def test_a_turn_over_its_conversation_s_token_budget_fails_before_its_next_model_call(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])
    world.client.admin.set_budget(conversation_id=conversation_id, max_tokens=15)
    scripted = fakes.ScriptedModel(fakes.by_iteration([ADD, fakes.text("3")]))
    assert run(world.runner(scripted), conversation_id) is Outcome.FAILED
    assert len(scripted.requests) == 1  # the second call was never made
    view = world.client.get_conversation(conversation_id)
    assert view.error == (
        "Budget exceeded: this conversation used 15 tokens in total; its total token budget is 15"
    )
    assert world.roles(conversation_id) == ["user", "assistant", "tool"]  # the tool ran

    # The web side refuses what would fail at once, and writes nothing.
    events = len(world.client.events(conversation_id, limit=1000).events)
    with pytest.raises(BudgetExceeded, match="used 15 tokens in total"):
        world.client.submit_message(conversation_id, "Try again")
    with pytest.raises(BudgetExceeded):
        world.client.retry_conversation(conversation_id)
    assert len(world.client.events(conversation_id, limit=1000).events) == events

    # Raised, the turn goes on from its transcript.
    world.client.admin.set_budget(conversation_id=conversation_id, max_tokens=1000)
    world.client.retry_conversation(conversation_id)
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE


def test_a_crash_does_not_reset_a_budget_a_new_worker_reads_the_committed_totals(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])
    scripted = fakes.ScriptedModel(fakes.by_iteration([ADD, fakes.text("3")]))

    assert world.store.claim(conversation_id, "first-worker", -1) is not None
    world.client.admin.set_budget(conversation_id=conversation_id, max_tokens=15)
    # The first worker's step, as it committed it before it died: 15 tokens spent.
    snapshot = world.store.claim(conversation_id, "second-claim", -1)
    assert snapshot is not None
    world.store.record_tool_calls(
        snapshot.claim,
        status="processing",
        seq=2,
        parent=1,
        content=None,
        calls=ADD.tool_calls,
        usage=ADD.usage,
        ttl=-1,
    )
    assert run(world.runner(scripted), conversation_id) is Outcome.FAILED
    assert scripted.requests == []  # the new worker never called the model
    assert "used 15 tokens" in (world.client.get_conversation(conversation_id).error or "")


def test_an_owner_s_daily_money_budget_spans_their_conversations_and_resets_the_next_day(
    world: World,
) -> None:
    world.client.admin.set_budget(owner="alice", period="day", max_cost_usd=0.5)
    first = world.client.create_conversation(tools=["add"], owner="alice")
    world.client.submit_message(first, "1 + 2?")
    scripted = fakes.ScriptedModel(
        fakes.by_iteration([priced(ADD, 0.25), priced(fakes.text("3"), 0.25)])
    )
    assert run(world.runner(scripted), first) is Outcome.IDLE  # 0.25, then 0.25: both allowed

    second = world.client.create_conversation(tools=["add"], owner="alice")
    with pytest.raises(BudgetExceeded) as refused:
        world.client.submit_message(second, "Another question")
    assert str(refused.value) == (
        "Budget exceeded: owner 'alice' spent $0.5000 today (UTC); its daily budget is $0.5000"
    )
    others = world.client.create_conversation(tools=["add"], owner="bob")
    world.client.submit_message(others, "Bob is not alice")  # another owner's budget
    with world.engine.connect() as connection:
        tomorrow = datetime.now(UTC) + timedelta(days=1)
        assert budgets.check(connection, second, now=tomorrow) is None
    world.client.cancel(others)  # (nothing runs it here)


def test_an_unpriced_call_counts_its_tokens_but_no_money(world: World) -> None:
    world.client.admin.set_budget(owner="carol", max_cost_usd=0.01)
    world.client.admin.set_budget(owner="carol", period="day", max_tokens=1000)
    conversation_id = world.client.create_conversation(tools=["add"], owner="carol")
    world.client.submit_message(conversation_id, "Hi")
    scripted = fakes.ScriptedModel(fakes.by_iteration([priced(fakes.text("Hello"), None)]))
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    with world.engine.connect() as connection:
        spent = [
            budgets.spend(connection, limit)
            for limit in budgets.applying(connection, conversation_id)
        ]
    assert sorted(spent) == [(15, 0), (15, 0)]
    listed = world.client.admin.list_budgets("carol")
    assert {(b.period, b.max_tokens, b.max_cost_usd) for b in listed} == {
        ("total", None, 0.01),
        ("day", 1000, None),
    }


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({}, "give exactly one"),
        ({"owner": "a", "conversation_id": "new"}, "give exactly one"),
        ({"owner": "a"}, "needs max_tokens, max_cost_usd or both"),
        ({"owner": "a", "max_tokens": -1}, "max_tokens must be a whole number"),
        ({"owner": "a", "max_tokens": 1.5}, "max_tokens must be a whole number"),
        ({"owner": "a", "max_tokens": True}, "max_tokens must be a whole number"),
        ({"owner": "a", "max_cost_usd": -0.01}, "max_cost_usd must be a number >= 0"),
        ({"owner": "a", "max_cost_usd": "lots"}, "max_cost_usd must be a number"),
        ({"owner": "a", "max_cost_usd": float("nan")}, "max_cost_usd must be a number >= 0"),
        ({"owner": "a", "max_cost_usd": float("inf")}, "max_cost_usd must be a number >= 0"),
        ({"owner": "a", "max_tokens": 5, "period": "week"}, "period must be one of total, day"),
        ({"owner": " ", "max_tokens": 5}, "owner must be a non-empty string"),
    ],
)
def test_a_bad_budget_is_refused_and_writes_nothing(
    world: World, options: dict[str, Any], refusal: str
) -> None:
    if options.get("conversation_id") == "new":
        options = {**options, "conversation_id": world.conversation()}
    with pytest.raises(InvalidRequest, match=refusal):
        world.client.admin.set_budget(**options)
    assert world.client.admin.list_budgets() == []
    if options.get("conversation_id") is not None:
        world.client.cancel(options["conversation_id"])


def test_a_budget_of_an_unknown_conversation_is_refused(world: World) -> None:
    with pytest.raises(ConversationNotFound):
        world.client.admin.set_budget(conversation_id=uuid.uuid4(), max_tokens=5)
    assert world.client.admin.list_budgets() == []


def test_budgets_go_with_their_conversation_and_can_be_removed(world: World) -> None:
    conversation_id = world.conversation()
    world.client.admin.set_budget(conversation_id=conversation_id, max_tokens=5)
    world.client.admin.set_budget(owner="dave", max_tokens=5)
    assert world.client.admin.remove_budget(owner="dave") is True
    assert world.client.admin.remove_budget(owner="dave") is False
    world.client.cancel(conversation_id)
    world.client.delete_conversation(conversation_id)
    assert world.client.admin.list_budgets() == []


# --- over HTTP ----------------------------------------------------------------------------------


def test_the_api_answers_a_submit_over_budget_with_429_budget_exceeded(sqlite_url: str) -> None:
    from fastapi.testclient import TestClient

    from app.api import create_app
    from app.client import ChatClient
    from app.config import load_settings
    from app.migrate import upgrade

    upgrade(sqlite_url)
    settings = load_settings(database_url=sqlite_url, api_auth=("none",))
    with TestClient(create_app(settings)) as http:
        conversation = http.post("/v1/conversations", json={"tools": []}).json()
        client = ChatClient(settings)
        client.admin.set_budget(conversation_id=conversation["id"], max_tokens=0)
        client.close()
        refused = http.post(
            f"/v1/conversations/{conversation['id']}/messages", json={"text": "hello"}
        )
    assert refused.status_code == 429, refused.text
    problem = refused.json()
    assert problem["code"] == "budget_exceeded"
    assert "this conversation used 0 tokens in total" in problem["detail"]
