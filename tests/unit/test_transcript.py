"""What the model is sent: the provider messages of a transcript, built whole or entry by entry."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from app.worker.messages import INTERRUPTED_RESULT
from app.worker.plan import Entry, ToolCall
from app.worker.transcript import Transcript, provider_messages
from tests.unit.entries import A, B, C, answer, calls, result, user


def test_every_tool_call_id_of_a_transcript_is_known() -> None:
    assert Transcript(None, [user(1), calls(2, A, B), result(3, A), calls(4, C)]).call_ids == {
        "call_a",
        "call_b",
        "call_c",
    }


# --- what the provider is sent --------------------------------------------------------------------


def test_provider_messages_for_a_clean_transcript() -> None:
    transcript = [user(1, "hi"), calls(2, A), result(3, A, "found"), answer(4, "done")]
    assert provider_messages("Be brief.", transcript) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search_docs", "arguments": '{"query": "redis"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "found"},
        {"role": "assistant", "content": "done"},
    ]


def test_no_instructions_means_no_system_message() -> None:
    assert provider_messages(None, [user(1, "hi")]) == [{"role": "user", "content": "hi"}]


def test_dangling_calls_get_a_synthetic_result_right_after_their_message() -> None:
    transcript = [user(1), calls(2, A, B), result(3, B, "b done"), user(4, "again")]
    messages = provider_messages(None, transcript)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": INTERRUPTED_RESULT}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_b", "content": "b done"}


def test_every_assistant_tool_call_is_answered_exactly_once() -> None:
    transcript = [user(1), calls(2, A, B), result(3, B), result(4, A), calls(5, C), user(6)]
    messages = provider_messages(None, transcript)
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)
    # and each result follows its own assistant message directly, in call order
    assert answered == ["call_a", "call_b", "call_c"]


def test_results_answering_no_call_are_dropped() -> None:
    orphan = result(2, ToolCall("call_zz", "add", "{}"))
    messages = provider_messages(None, [user(1), orphan, answer(3)])
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_invalid_json_arguments_are_sent_as_an_empty_object() -> None:
    broken = ToolCall("call_x", "add", '{"a": 1,')
    messages = provider_messages(None, [user(1), calls(2, broken), result(3, broken, "bad")])
    sent = messages[1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == {}


@pytest.mark.parametrize("arguments", ["[1,2]", '"x"', "3", "null", "", "not json"])
def test_arguments_that_are_not_a_json_object_are_sent_as_an_empty_object(arguments: str) -> None:
    # Anthropic rejects a tool_use `input` that is not an object; the planner never ran the call.
    bad = ToolCall("call_x", "add", arguments)
    transcript = Transcript(None, [user(1), calls(2, bad), result(3, bad, "bad", is_error=True)])
    sent = transcript.provider_messages()[1]["tool_calls"][0]["function"]["arguments"]
    assert sent == "{}"
    assert transcript[1].tool_calls[0].arguments == arguments  # what the model said is kept


@pytest.mark.parametrize("arguments", ['{"a": 1, "b": 2}', ' {\n  "a" : [1, 2] }', "{}"])
def test_a_json_object_is_sent_byte_for_byte(arguments: str) -> None:
    call = ToolCall("call_x", "add", arguments)
    messages = provider_messages(None, [user(1), calls(2, call), result(3, call)])
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == arguments


def random_transcript(draw: random.Random, length: int) -> list[Entry]:
    """Entries in the shapes a conversation can hold, including turns that failed midway."""
    entries: list[Entry] = []
    number = 0
    while len(entries) < length:
        seq = len(entries) + 1
        kind = draw.choice(["user", "calls", "answer"]) if entries else "user"
        if kind == "user":
            entries.append(user(seq, f"q{seq}"))
        elif kind == "answer":
            entries.append(answer(seq, f"a{seq}"))
        else:
            asked = []
            for _ in range(draw.randint(1, 3)):
                number += 1
                arguments = draw.choice(['{"n": 1}', "{broken", "[]"])
                asked.append(ToolCall(f"call_{number}", "add", arguments))
            entries.append(calls(seq, *asked))
            answered = [c for c in asked if draw.random() < 0.8]  # some interrupted
            draw.shuffle(answered)
            for call in answered:
                entries.append(result(len(entries) + 1, call, f"r{call.id}"))
    return entries


def reference_messages(entries: list[Entry]) -> list[dict[str, Any]]:
    """The rules written as one pass over the whole transcript (the planner's first version)."""
    results = {e.tool_call_id: e for e in entries if e.role == "tool"}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for entry in entries:
        if entry.role == "user":
            messages.append({"role": "user", "content": entry.content})
        elif entry.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": entry.content}
            if entry.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _object_or_empty(c.arguments)},
                    }
                    for c in entry.tool_calls
                ]
            messages.append(message)
            for call in entry.tool_calls:
                found = results.get(call.id)
                content = INTERRUPTED_RESULT if found is None else found.content
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return messages


def _object_or_empty(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments if isinstance(parsed, dict) else "{}"


def test_appending_entry_by_entry_gives_what_a_pass_over_the_whole_history_gives() -> None:
    draw = random.Random(7)
    for _ in range(300):
        entries = random_transcript(draw, draw.randint(1, 40))
        growing = Transcript("sys")
        for index, entry in enumerate(entries):
            growing.append(entry)
            assert growing.provider_messages() == reference_messages(entries[: index + 1])
        assert provider_messages("sys", entries) == reference_messages(entries)
        assert list(growing) == entries


def test_every_call_sent_is_answered_once_right_after_its_message() -> None:
    draw = random.Random(11)
    for _ in range(300):
        messages = provider_messages(None, random_transcript(draw, draw.randint(1, 40)))
        for index, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            asked = [c["id"] for c in message.get("tool_calls", [])]
            following = messages[index + 1 : index + 1 + len(asked)]
            assert [m.get("tool_call_id") for m in following] == asked
        tool_messages = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert len(tool_messages) == len(set(tool_messages))


def test_the_list_returned_is_the_callers_own() -> None:
    transcript = Transcript(None, [user(1)])
    sent = transcript.provider_messages()
    sent.append({"role": "user", "content": "extra"})
    assert transcript.provider_messages() == [{"role": "user", "content": "question"}]
