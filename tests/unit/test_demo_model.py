"""The offline demo model: its decisions as a pure function of the request, and the `demo`
litellm provider that serves them with no network and no API key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.demo.model import DEFAULT_DEMO_MODEL, demo_reply, find_expression


def function_tool(name: str, required: list[str] | None = None) -> dict[str, Any]:
    properties = {param: {"type": "string"} for param in required or []}
    parameters = {"type": "object", "properties": properties, "required": required or []}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


CALCULATE = function_tool("calculate", ["expression"])
SEARCH_DOCS = function_tool("search_docs", ["query"])
NEEDS_ARGS = function_tool("add", ["a", "b"])
NO_ARGS = function_tool("now")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def the_call(reply: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    assert reply["finish_reason"] == "tool_calls"
    [call] = reply["message"]["tool_calls"]
    return call["id"], call["function"]["name"], json.loads(call["function"]["arguments"])


def assistant_calling(call_id: str, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": "{}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


# --- decisions ------------------------------------------------------------------------------


def test_arithmetic_calls_calculate_with_the_expression() -> None:
    reply = demo_reply([user("What is 2*(3+4) please?")], [SEARCH_DOCS, CALCULATE])

    assert the_call(reply) == ("demo_call_0", "calculate", {"expression": "2*(3+4)"})


def test_other_questions_search_the_docs_with_the_trimmed_text() -> None:
    question = "  How does postgres vacuum work? " + "x" * 300

    reply = demo_reply([user(question)], [CALCULATE, SEARCH_DOCS])

    _, name, arguments = the_call(reply)
    assert name == "search_docs"
    assert arguments == {"query": question.strip()[:200]}


def test_arithmetic_without_a_calculator_searches_the_docs() -> None:
    _, name, _ = the_call(demo_reply([user("1 + 1")], [SEARCH_DOCS]))

    assert name == "search_docs"


def test_an_argument_free_first_tool_is_called_when_nothing_else_fits() -> None:
    assert the_call(demo_reply([user("hi")], [NO_ARGS, NEEDS_ARGS]))[1:] == ("now", {})


def test_a_tool_that_needs_arguments_is_not_called_blindly() -> None:
    reply = demo_reply([user("hi")], [NEEDS_ARGS])

    assert reply["finish_reason"] == "stop"
    assert reply["message"]["content"].startswith("[demo model] You said: hi")


FINAL = {
    "type": "function",
    "function": {
        "name": "final_result",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["C", "F"]},
                "rain": {"type": "boolean"},
            },
            "required": ["city", "days", "unit", "rain"],
        },
    },
}


def test_tool_choice_required_always_calls_a_tool_its_arguments_built_from_its_schema() -> None:
    """Without `required` a tool that needs arguments is not called; with it, the first tool is,
    each required argument filled by its type: the user's text, zero, the first of an enum,
    false (how a structured-output framework's `final_result` gets called offline)."""
    assert demo_reply([user("Oslo")], [FINAL])["finish_reason"] == "stop"
    assert the_call(demo_reply([user("Oslo")], [FINAL], "required"))[1:] == (
        "final_result",
        {"city": "Oslo", "days": 0, "unit": "C", "rain": False},
    )


def test_a_named_tool_choice_calls_that_tool_and_none_calls_nothing() -> None:
    named = {"type": "function", "function": {"name": "add"}}
    _, name, arguments = the_call(demo_reply([user("2+2")], [CALCULATE, NEEDS_ARGS], named))
    assert (name, arguments) == ("add", {"a": "2+2", "b": "2+2"})
    assert demo_reply([user("2+2")], [CALCULATE], "none")["finish_reason"] == "stop"


def test_required_does_not_call_again_after_tool_results() -> None:
    """`required` holds for the step after the user's message; the results are then answered
    in text (else the loop would call tools until its iterations ran out)."""
    messages = [
        user("Oslo"),
        assistant_calling("demo_call_0", "final_result"),
        {"role": "tool", "tool_call_id": "demo_call_0", "content": "ok"},
    ]
    assert demo_reply(messages, [FINAL], "required")["finish_reason"] == "stop"


def test_the_call_id_counts_the_assistant_messages_so_far() -> None:
    messages = [
        user("first"),
        assistant_calling("demo_call_0", "search_docs"),
        {"role": "tool", "tool_call_id": "demo_call_0", "content": "r"},
        {"role": "assistant", "content": "done"},
        user("now 6*7"),
    ]

    assert the_call(demo_reply(messages, [CALCULATE]))[0] == "demo_call_2"


def test_tool_results_are_summarized_in_text() -> None:
    messages = [
        user("What is 6*7?"),
        assistant_calling("demo_call_0", "calculate"),
        {"role": "tool", "tool_call_id": "demo_call_0", "content": "42" + " " * 10 + "y" * 400},
    ]

    reply = demo_reply(messages, [CALCULATE])

    assert reply["finish_reason"] == "stop"
    assert "tool_calls" not in reply["message"]
    content = reply["message"]["content"]
    assert content.startswith("[demo model] From calculate: 42")
    assert len(content) < 350


def test_no_tools_echoes_the_user_with_a_hint_about_real_models() -> None:
    reply = demo_reply([{"role": "system", "content": "be brief"}, user("  hello  ")], [])

    content = reply["message"]["content"]
    assert content.startswith("[demo model] You said: hello\n")
    assert "openai/gpt-4o-mini" in content
    assert reply["finish_reason"] == "stop"


def test_the_reply_is_deterministic_with_small_token_counts() -> None:
    messages = [user("What is 1+2?")]

    first = demo_reply(messages, [CALCULATE])

    assert first == demo_reply(messages, [CALCULATE])
    usage = first["usage"]
    assert 0 < usage["prompt_tokens"] < 50
    assert 0 < usage["completion_tokens"] < 50
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("what is 2 + 2?", "2 + 2"),
        ("compute (1+2) * -3, thanks", "(1+2) * -3"),
        ("(roughly 7/2)", "7/2"),
        ("2 ** 10 % 1000", "2 ** 10 % 1000"),
        ("I have 3 apples", None),
        ("state-of-the-art", None),
        ("no numbers here", None),
    ],
)
def test_find_expression(text: str, expression: str | None) -> None:
    assert find_expression(text) == expression


# --- through litellm ------------------------------------------------------------------------


def test_the_demo_provider_answers_through_litellm_offline() -> None:
    from app.demo.model import register
    from app.worker.llm import prepare_litellm

    prepare_litellm()
    register()
    register()  # idempotent: registered once
    import litellm

    assert [p["provider"] for p in litellm.custom_provider_map].count("demo") == 1
    question = [user("What is 6*7?")]

    async def call(messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        return await litellm.acompletion(
            model=DEFAULT_DEMO_MODEL, messages=messages, timeout=5, max_retries=0, **kwargs
        )

    forced = asyncio.run(call([user("Oslo")], tools=[FINAL], tool_choice="required"))
    assert forced.choices[0].message.tool_calls[0].function.name == "final_result"
    first = asyncio.run(call(question, tools=[CALCULATE], tool_choice="auto"))
    [tool_call] = first.choices[0].message.tool_calls
    answered = [
        *question,
        assistant_calling(tool_call.id, tool_call.function.name),
        {"role": "tool", "tool_call_id": tool_call.id, "content": "42"},
    ]
    second = asyncio.run(call(answered, tools=[CALCULATE]))

    assert first.choices[0].finish_reason == "tool_calls"
    assert (tool_call.id, tool_call.function.name) == ("demo_call_0", "calculate")
    assert json.loads(tool_call.function.arguments) == {"expression": "6*7"}
    assert first.usage.prompt_tokens > 0
    assert second.choices[0].message.content == "[demo model] From calculate: 42"


# litellm's stream_chunk_builder builds a pydantic schema that warns about its own TypedDicts.
@pytest.mark.filterwarnings("ignore:Item 'summary' on TypedDict:UserWarning")
def test_the_demo_provider_streams_and_serves_sync_calls() -> None:
    from app.demo.model import register
    from app.worker.llm import prepare_litellm

    prepare_litellm()
    register()
    import litellm

    text = litellm.completion(model="demo/anything", messages=[user("hi")], max_retries=0)
    chunks = list(
        litellm.completion(
            model=DEFAULT_DEMO_MODEL, messages=[user("1+1")], tools=[CALCULATE], stream=True
        )
    )
    rebuilt: Any = litellm.stream_chunk_builder(chunks)

    assert text.choices[0].message.content.startswith("[demo model] You said: hi")
    assert rebuilt.choices[0].finish_reason == "tool_calls"
    [call] = rebuilt.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("calculate", '{"expression": "1+1"}')
