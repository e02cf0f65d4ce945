"""Structured output and fallback models through the real litellm HTTP path, against the fake
LLM server in both wire formats (OpenAI chat completions, Anthropic messages), checking what
arrived: the schema as each provider takes it (OpenAI's `response_format`, Anthropic's
`output_format`), or told in a system message to a model without that mode; the repair of an
answer that missed it; and the order a failing call moves through its fallback models.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.config import load_settings
from app.errors import InvalidOutputSchema, InvalidRequest
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.llm import LiteLLMClient
from app.worker.structured import REPAIR_PROMPT
from tests.integration.test_loop import CONFIG, World
from tests.integration.test_user_in_the_loop import world_of

TICKET = {
    "name": "ticket",
    "schema": {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["bug", "question"]},
            "priority": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "required": ["kind", "priority"],
        "additionalProperties": False,
    },
    "strict": True,
}
GOOD = {"kind": "bug", "priority": 2}
# A model each provider's map says takes a response schema, and one it does not know.
NATIVE = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-sonnet-4-5"}
TOLD = {"openai": "openai/fake-model", "anthropic": "anthropic/claude-fake"}


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    tools = fakes.InMemoryTools(
        {"lookup": lambda order="1": f"order {order}: shipped"},
        annotations={"lookup": {"readOnlyHint": True}},
    )
    yield from world_of(any_database_url, tools)


async def _no_wait(seconds: float) -> None:
    pass


def worker(world: World, llm: FakeLLMServer, model: str, **settings: Any) -> TurnRunner:
    base = llm.anthropic_base if model.startswith("anthropic/") else llm.api_base
    return TurnRunner(
        world.store,
        # (the retry policy's waits are skipped: a fallback follows three failed attempts)
        model=LiteLLMClient(timeout=10, api_base=base, api_key="sk-test", sleep=_no_wait),
        tools=world.tools,
        settings=load_settings(**{**CONFIG.model_dump(), **settings}) if settings else CONFIG,
        owner="worker-1",
    )


def run(world: World, llm: FakeLLMServer, conversation_id: uuid.UUID, model: str) -> Outcome:
    return asyncio.run(worker(world, llm, model).run(conversation_id))


def start(world: World, text: str = "The export button crashes.", **options: Any) -> uuid.UUID:
    conversation_id = world.client.create_conversation(**options)
    world.client.submit_message(conversation_id, text)
    return conversation_id


def answers(world: World, conversation_id: uuid.UUID) -> list[Any]:
    return [
        m for m in world.client.get_conversation(conversation_id).messages if m.role == "assistant"
    ]


def wire(model: str) -> str:
    return model.split("/", 1)[0]


def sent_schema(body: dict[str, Any], provider: str) -> Any:
    """The schema a request carried in its provider's structured-output field."""
    if provider == "openai":
        found = body.get("response_format")
        return None if found is None else found["json_schema"]["schema"]
    found = body.get("output_format")
    return None if found is None else found["schema"]


def told(body: Any) -> str:
    """The instruction that tells a model the schema, wherever its wire format put it (OpenAI: a
    system message; Anthropic: litellm folds a system message after the first into the text of
    the message it follows); "" when the request carried none."""
    if isinstance(body, str):
        return body if "only a JSON value" in body else ""
    parts = body.values() if isinstance(body, dict) else body if isinstance(body, list) else ()
    return next((found for part in parts if (found := told(part))), "")


@pytest.mark.parametrize("model", NATIVE.values())
def test_a_model_with_a_structured_mode_gets_the_schema_and_the_answer_is_parsed(
    world: World, fake_llm: FakeLLMServer, model: str
) -> None:
    fake_llm.script([{"text": json.dumps(GOOD)}])
    conversation_id = start(world, model=model, output_schema=TICKET)

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    (request,) = fake_llm.requests()
    sent = sent_schema(request["body"], wire(model))
    # (Anthropic's form keeps a number's bounds in its description: litellm moves them there)
    assert sent["required"] == ["kind", "priority"] and sent["additionalProperties"] is False
    assert sent["properties"]["kind"] == TICKET["schema"]["properties"]["kind"]
    assert told(request["body"]) == ""
    (answer,) = answers(world, conversation_id)
    assert answer.output == GOOD and not answer.is_error
    assert answer.usage is not None and answer.usage["model"] == model
    turn = world.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "completed"
    finished = world.client.wait_for_turn(turn.id, 1)
    assert finished.output == GOOD and finished.output_text == json.dumps(GOOD)
    # the event log's message carries the parsed object too
    committed = [
        e.message
        for e in world.client.events(conversation_id, limit=100).events
        if e.type == "message.committed" and e.message is not None
    ]
    assert committed[-1].output == GOOD


@pytest.mark.parametrize("model", TOLD.values())
def test_a_model_without_one_is_told_the_schema_and_its_answer_checked_the_same(
    world: World, fake_llm: FakeLLMServer, model: str
) -> None:
    fake_llm.script([{"text": "```json\n" + json.dumps(GOOD) + "\n```"}])
    conversation_id = start(world, model=model, output_schema=TICKET)

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    (request,) = fake_llm.requests()
    body = request["body"]
    assert sent_schema(body, wire(model)) is None
    instruction = told(body)
    assert json.loads(instruction.split("code fence):\n", 1)[1]) == TICKET["schema"]
    (answer,) = answers(world, conversation_id)
    assert answer.output == GOOD


@pytest.mark.parametrize("model", [NATIVE["openai"], TOLD["anthropic"]])
def test_an_answer_that_misses_the_schema_is_repaired_once(
    world: World, fake_llm: FakeLLMServer, model: str
) -> None:
    fake_llm.script([{"text": '{"kind": "feature", "priority": 1}'}, {"text": json.dumps(GOOD)}])
    conversation_id = start(world, model=model, output_schema=TICKET)

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    _, second = fake_llm.requests()
    repair = json.dumps(second["body"]["messages"][-1])
    assert "does not match the required JSON Schema" in repair
    assert "'feature' is not one of" in repair
    assert '\\"feature\\"' in json.dumps(second["body"]["messages"][-2])
    refused, repaired = answers(world, conversation_id)
    assert refused.is_error and refused.output is None
    assert repaired.output == GOOD and not repaired.is_error
    view = world.client.get_conversation(conversation_id)
    assert view.status == "idle" and view.iterations == 2  # (both calls counted)
    assert world.row(conversation_id).completion_tokens > 0


def test_an_answer_that_never_matches_fails_the_turn_saying_what_was_wrong(
    world: World, fake_llm: FakeLLMServer
) -> None:
    model = NATIVE["openai"]
    fake_llm.script([{"text": "It is a bug."}, {"text": '{"kind": "bug"}'}])
    conversation_id = start(world, model=model, output_schema=TICKET)

    assert run(world, fake_llm, conversation_id, model) is Outcome.FAILED

    view = world.client.get_conversation(conversation_id)
    assert view.status == "failed"
    assert view.error is not None
    assert view.error.startswith("The model's answer did not match the output schema after 1")
    assert "'priority' is a required property" in view.error
    assert [a.is_error for a in answers(world, conversation_id)] == [True, True]
    assert len(fake_llm.requests()) == 2
    # a retry starts over: the model is asked again, with both answers and what was wrong
    fake_llm.script([{"text": json.dumps(GOOD)}])
    world.client.retry_conversation(conversation_id)
    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE
    assert answers(world, conversation_id)[-1].output == GOOD


def test_a_message_s_own_schema_is_over_the_conversation_s(
    world: World, fake_llm: FakeLLMServer
) -> None:
    model = NATIVE["openai"]
    yes_no = {"schema": {"type": "object", "properties": {"yes": {"type": "boolean"}}}}
    fake_llm.script([{"text": '{"yes": true}'}, {"text": "plain words"}])
    conversation_id = world.client.create_conversation(model=model)
    submitted = world.client.submit_message(conversation_id, "Is it a bug?", output_schema=yes_no)
    assert submitted.turn is not None and submitted.turn.output_schema is not None
    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE
    world.client.submit_message(conversation_id, "Tell me more.")
    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    first, second = fake_llm.requests()
    assert first["body"]["response_format"]["json_schema"]["name"] == "answer"
    assert "response_format" not in second["body"]
    structured, plain = answers(world, conversation_id)
    assert structured.output == {"yes": True} and plain.output is None


DEEP: dict[str, Any] = {"type": "object"}
for _ in range(120):
    DEEP = {"type": "object", "properties": {"a": DEEP}}


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ("not an object", "output_schema must be an object"),
        ({"schema": {"type": "array"}}, 'must describe an object ("type": "object"'),
        ({"schema": {"type": "object", "properties": {"a": {"type": 7}}}}, "not a valid JSON"),
        ({"name": "a name", "schema": {"type": "object"}}, "name must be 1-64 letters"),
        ({"schema": {"type": "object"}, "strict": "yes"}, "strict must be true or false"),
        ({"schema": {"type": "object"}, "format": "json"}, "unknown field(s) format"),
        (
            {"schema": {"type": "object", "properties": {"a": {"$ref": "https://x.test/a"}}}},
            "points outside the schema",
        ),
        (
            {"schema": {"type": "object", "description": "x" * 100_001}},
            "over 100,000",
        ),
        # each bound before the work it protects: a pattern RE2 cannot run (it runs them all),
        # nesting past 64 levels, a $ref that loops or points to nothing
        (
            {"schema": {"type": "object", "properties": {"a": {"pattern": "a{4294967296}"}}}},
            "a repetition {4294967296} is over 1,000",
        ),
        (
            {"schema": {"type": "object", "properties": {"a": {"pattern": "(?<=a)b"}}}},
            "at properties/a/pattern",
        ),
        (
            {"schema": {"type": "object", "patternProperties": {"(a)\\1": {}}}},
            "patterns run in RE2",
        ),
        ({"schema": DEEP}, "nests objects and arrays over 64 levels deep"),
        ({"schema": {"type": "object", "$ref": "#"}}, "a $ref leads back to a schema"),
        ({"schema": {"type": "object", "$ref": "#/$defs/gone"}}, "points to nothing"),
    ],
)
def test_a_bad_schema_is_refused_and_nothing_is_written(
    world: World, schema: Any, says: str
) -> None:
    with pytest.raises(InvalidOutputSchema, match="output_schema") as caught:
        world.client.create_conversation(model="openai/gpt-4o-mini", output_schema=schema)
    assert says in str(caught.value)
    conversation_id = world.client.create_conversation(model="openai/gpt-4o-mini")
    with pytest.raises(InvalidOutputSchema) as again:
        world.client.submit_message(conversation_id, "hi", output_schema=schema)
    assert says in str(again.value)
    view = world.client.get_conversation(conversation_id)
    assert view.messages == [] and view.turn_number == 0


@pytest.mark.parametrize(
    ("fallbacks", "says"),
    [
        ("openai/b", "fallback_models must be a list"),
        (["openai/b", "openai/b"], "is named twice"),
        (["openai/a"], "is the conversation's own model"),
        (["m"] * 6, "at most 5 models"),
        ([""], "model must be a non-empty string"),
    ],
)
def test_bad_fallback_models_are_refused(world: World, fallbacks: Any, says: str) -> None:
    with pytest.raises(InvalidRequest, match="model") as caught:
        world.client.create_conversation(model="openai/a", fallback_models=fallbacks)
    assert says in str(caught.value)


# --- fallback models ----------------------------------------------------------------------------

PAIRS = {
    "openai": ("openai/gpt-4o-mini", "openai/gpt-4o"),
    "anthropic": ("anthropic/claude-sonnet-4-5", "anthropic/claude-3-5-haiku-20241022"),
}


def provider_name(model: str) -> str:
    return model.split("/", 1)[1]


@pytest.mark.parametrize("provider", PAIRS)
@pytest.mark.parametrize("failure", [503, 500, 429])
def test_a_down_model_falls_back_to_the_next_in_order_and_the_log_says_which_answered(
    world: World, fake_llm: FakeLLMServer, provider: str, failure: int
) -> None:
    primary, backup = PAIRS[provider]
    fake_llm.script([], default={"error": failure, "message": "down"}, model=provider_name(primary))
    fake_llm.script([{"text": "The backup answers."}], model=provider_name(backup))
    conversation_id = start(world, model=primary, fallback_models=[backup])

    assert run(world, fake_llm, conversation_id, primary) is Outcome.IDLE

    asked = [request["body"]["model"] for request in fake_llm.requests()]
    tries = 1 if failure == 500 else 3  # (a 500 is not retried; 429 and 503 are, 3 times)
    assert asked == [provider_name(primary)] * tries + [provider_name(backup)]
    events = world.client.events(conversation_id, limit=100).events
    (fallback,) = [e for e in events if e.type == "model.fallback"]
    assert fallback.data is not None
    assert fallback.data["from"] == primary and fallback.data["to"] == backup
    assert str(failure) in fallback.data["error"]
    (answer,) = answers(world, conversation_id)
    assert answer.content == "The backup answers."
    assert answer.usage is not None and answer.usage["model"] == backup
    turn = world.client.get_turn(fallback.turn_id)  # type: ignore[arg-type]
    assert turn.model == backup and turn.status == "completed"
    # the next turn starts on the conversation's model again
    fake_llm.script([{"text": "Back on the primary."}], model=provider_name(primary))
    world.client.submit_message(conversation_id, "again")
    assert run(world, fake_llm, conversation_id, primary) is Outcome.IDLE
    assert fake_llm.requests()[-1]["body"]["model"] == provider_name(primary)


def test_every_model_down_fails_the_turn_with_the_last_error(
    world: World, fake_llm: FakeLLMServer
) -> None:
    primary, backup = PAIRS["openai"]
    fake_llm.script([], default={"error": 502, "message": "bad gateway"})
    conversation_id = start(world, model=primary)

    runner = worker(world, fake_llm, primary, fallback_models=(backup,))
    assert asyncio.run(runner.run(conversation_id)) is Outcome.FAILED

    asked = [request["body"]["model"] for request in fake_llm.requests()]
    assert asked == [provider_name(primary), provider_name(backup)]  # (from the settings)
    view = world.client.get_conversation(conversation_id)
    assert view.status == "failed" and view.error is not None and "502" in view.error
    fallbacks = [
        e for e in world.client.events(conversation_id).events if e.type == "model.fallback"
    ]
    assert len(fallbacks) == 1


def test_a_refused_request_does_not_fall_back(world: World, fake_llm: FakeLLMServer) -> None:
    primary, backup = PAIRS["openai"]
    fake_llm.script([{"error": 400, "message": "messages: bad"}])
    conversation_id = start(world, model=primary, fallback_models=[backup])

    assert run(world, fake_llm, conversation_id, primary) is Outcome.FAILED

    assert [r["body"]["model"] for r in fake_llm.requests()] == [provider_name(primary)]
    assert "model.fallback" not in {e.type for e in world.client.events(conversation_id).events}


def test_the_repair_prompt_names_the_violation() -> None:
    assert "{error}" in REPAIR_PROMPT
