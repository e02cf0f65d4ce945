"""Prompt caching: every request's prefix is stable (instructions, tools in one order, the
committed transcript) and marked for the provider (OpenAI's `prompt_cache_key` = the conversation,
Anthropic's `cache_control` on the system prompt and the newest message, through litellm); the
cached prompt tokens each call read are kept per call (the message it wrote), turn and
conversation, and priced at the cached price by litellm's price map. Against the fake LLM server,
which accounts its cache the way each provider does, through the real litellm client.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.api.schemas import Usage
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.llm import LiteLLMClient
from tests.integration.test_loop import CONFIG, World
from tests.integration.test_user_in_the_loop import world_of

# Long enough to be cached (providers cache from 1,024 tokens on).
INSTRUCTIONS = "You are the support agent of ACME. " + " ".join(
    f"Policy {n}: refunds of order class {n} are handled within {n % 7 + 1} days."
    for n in range(150)
)
# Per token, in US dollars (litellm's bundled price map).
PRICES = {
    "openai/gpt-4o": {"input": 2.5e-06, "read": 1.25e-06, "write": 2.5e-06, "output": 1e-05},
    "anthropic/claude-sonnet-4-5": {
        "input": 3e-06,
        "read": 3e-07,
        "write": 3.75e-06,
        "output": 1.5e-05,
    },
}


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    tools = fakes.InMemoryTools(
        {"lookup": lambda order="1": f"order {order}: shipped"},
        annotations={"lookup": {"readOnlyHint": True}},
    )
    yield from world_of(any_database_url, tools)


def script(llm: FakeLLMServer) -> None:
    llm.script(
        [
            {"tool_calls": [{"id": "call_look", "name": "lookup", "arguments": {"order": "7"}}]},
            {"text": "Your order 7 has shipped."},
        ],
        mode="by_iteration",
    )


def converse(world: World, llm: FakeLLMServer, model: str, turns: int, **options: Any) -> uuid.UUID:
    base = llm.anthropic_base if model.startswith("anthropic/") else llm.api_base
    worker = TurnRunner(
        world.store,
        model=LiteLLMClient(timeout=10, api_base=base, api_key="sk-test"),
        tools=world.tools,
        settings=CONFIG,
        owner="worker-1",
    )
    conversation_id = world.client.create_conversation(
        model=model, instructions=INSTRUCTIONS, tools=["lookup"], **options
    )
    for n in range(turns):
        world.client.submit_message(conversation_id, f"Where is my order? ({n})")
        assert asyncio.run(worker.run(conversation_id)) is Outcome.IDLE
    return conversation_id


def turns_of(world: World, conversation_id: uuid.UUID) -> list[Any]:
    events = world.client.events(conversation_id, limit=1000).events
    ids = {event.turn_id for event in events if event.type == "turn.completed"}
    return [world.client.get_turn(turn_id) for turn_id in ids if turn_id is not None]


def expected_cost(model: str, usage: dict[str, Any]) -> float:
    price = PRICES[model]
    read, written = usage["cached_tokens"], usage["cache_write_tokens"]
    fresh = usage["prompt_tokens"] - read - written
    return (
        fresh * price["input"]
        + read * price["read"]
        + written * price["write"]
        + usage["completion_tokens"] * price["output"]
    )


@pytest.mark.parametrize("model", PRICES)
def test_cached_tokens_are_kept_per_call_turn_and_conversation_at_the_cached_price(
    world: World, fake_llm: FakeLLMServer, model: str
) -> None:
    script(fake_llm)
    conversation_id = converse(world, fake_llm, model, turns=3)

    bodies = [request["body"] for request in fake_llm.requests()]
    assert len(bodies) == 6
    for body in bodies:
        if model.startswith("openai/"):
            assert body["prompt_cache_key"] == str(conversation_id)
        else:
            assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
            last = body["messages"][-1]["content"][-1]
            assert last["cache_control"] == {"type": "ephemeral"}
    # The prefix is stable: each request starts with the whole of the one before.
    for before, after in itertools.pairwise(bodies):
        assert after["tools"] == before["tools"]
        assert (
            _plain(after["messages"])[: len(before["messages"]) - 1]
            == _plain(before["messages"])[:-1]
        )

    view = world.client.get_conversation(conversation_id)
    calls = [m.usage for m in view.messages if m.role == "assistant"]
    assert all(usage is not None for usage in calls)
    cached = [usage["cached_tokens"] for usage in calls if usage]
    assert cached[0] == 0 and all(tokens > 1_000 for tokens in cached[1:])
    for usage in calls:
        assert usage is not None
        assert usage["cost_usd"] == pytest.approx(expected_cost(model, usage), rel=1e-6), usage
        uncached = usage["prompt_tokens"] * PRICES[model]["input"]
        if usage["cached_tokens"]:
            assert usage["cost_usd"] < uncached + usage["completion_tokens"] * 1e-4
    turns = turns_of(world, conversation_id)
    assert len(turns) == 3
    assert sum(turn.cached_tokens for turn in turns) == sum(cached) == view.cached_tokens
    assert view.cost_usd == pytest.approx(sum(u["cost_usd"] for u in calls if u), rel=1e-6)
    assert Usage.model_validate(view.usage).cached_tokens == sum(cached)  # the API's usage


def test_with_prompt_caching_off_nothing_is_marked(world: World, fake_llm: FakeLLMServer) -> None:
    script(fake_llm)
    converse(world, fake_llm, "openai/gpt-4o", turns=1, context_policy={"prompt_cache": False})
    converse(
        world,
        fake_llm,
        "anthropic/claude-sonnet-4-5",
        turns=1,
        context_policy={"prompt_cache": False},
    )
    text = str([request["body"] for request in fake_llm.requests()])
    assert "prompt_cache_key" not in text and "cache_control" not in text


def _plain(messages: list[dict[str, Any]]) -> list[Any]:
    """Messages without their cache marks (the newest message's moves on)."""
    return [_unmarked(message) for message in messages]


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value
