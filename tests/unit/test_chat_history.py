"""Chat Completions requests placed by their history (app/api/chat/history.py, messages.py) and
their answers written as chunks (chunks.py): pure, no server."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.chat.chunks import ChatChunks
from app.api.chat.history import read_history
from app.api.responses.errors import Unsupported

SETUP = {"model": "m", "instructions": "be brief"}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None, *calls: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}}
            for c in calls
        ]
    return message


def tool(call: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call, "content": output}


def test_a_later_request_finds_the_turn_by_the_key_the_earlier_one_was_given() -> None:
    """The invariant the placing rests on: the digest a turn is submitted with is the digest a
    later request computes for the history before that turn's reply, user groups included."""
    system = {"role": "system", "content": "be brief"}
    first = read_history([system, user("a"), user("b")])
    assert first.instructions == "be brief" and first.text == "a\n\nb" and not first.earlier
    key = first.digest(SETUP)

    replies = [assistant(None, "c1"), tool("c1", "out"), assistant("x")]
    later = read_history([system, user("a"), user("b"), *replies, user("next")])
    assert later.text == "next" and later.last_reply is not None
    assert later.last_reply.text == "x"
    assert later.previous == 2 and later.boundaries == (2,)
    assert later.digest(SETUP, later.previous) == key  # the turn it continues
    assert later.digest(SETUP, later.boundaries[0]) == key  # its conversation's id
    assert later.digest(SETUP) != key
    assert later.digest({**SETUP, "model": "other"}, later.previous) != key  # setup counts


def test_the_third_turn_finds_the_second_among_the_first_turn_s_conversation() -> None:
    history = [user("a"), assistant("1"), user("b"), assistant("2"), user("c")]
    third = read_history(history)
    second = read_history(history[:3])
    assert third.boundaries == (1, 3) and third.previous == 3
    assert third.digest(SETUP, 3) == second.digest(SETUP)
    assert third.digest(SETUP, 1) == read_history(history[:1]).digest(SETUP)


def test_tool_messages_answer_the_last_assistant_message() -> None:
    found = read_history(
        [user("q"), assistant("looking", "c1", "c2"), tool("c1", "1"), tool("c2", "2")]
    )
    assert found.outputs == {"c1": "1", "c2": "2"}
    assert found.answered is not None and found.answered.call_ids == ["c1", "c2"]
    assert found.text is None


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([assistant("hi")], "begin with a user message"),
        ([user("q"), assistant("a")], "nothing to answer"),
        ([user("q"), assistant(None, "c1"), tool("c1", "1"), tool("c1", "2")], "no open call"),
        ([user("q"), assistant(None, "c1", "c2"), tool("c1", "1")], "c2 have no tool message"),
        ([user("q"), assistant(None, "c1"), user("r")], "have no tool message before"),
        (
            [
                user("q"),
                assistant(None, "c1"),
                tool("c1", "1"),
                assistant(None, "c1"),
                tool("c1", ""),
            ],
            "used twice",
        ),
        ([user("q"), {"role": "system", "content": "s"}, user("r")], "after the conversation"),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x"}}],
                }
            ],
            "data: URL",
        ),
        ([{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}], "file_id"),
        ([{"role": "user", "content": ""}], "needs text or a file"),
        ([{"role": "user", "content": 3}], "string or a list"),
        ([{"role": "tool", "content": "x"}], "tool_call_id"),
        ([{"role": "wizard", "content": "x"}], "role must be"),
        ([user("q"), {"role": "assistant", "content": None}, user("r")], "content or tool_calls"),
        ([user("q"), {"role": "assistant", "tool_calls": [{"id": "c"}]}], "function call"),
        ([], "non-empty list"),
        ("hello", "non-empty list"),
    ],
)
def test_what_cannot_be_placed_is_refused_naming_the_message(messages: Any, said: str) -> None:
    with pytest.raises(Unsupported, match=said):
        read_history(messages)


def test_a_user_message_s_image_and_file_parts_are_its_files() -> None:
    found = read_history(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    {
                        "type": "file",
                        "file": {"file_data": "data:text/plain;base64,QQ==", "filename": "a.txt"},
                    },
                ],
            }
        ]
    )
    assert found.text == "look"
    assert found.files == (
        {"data": "data:image/png;base64,AA=="},
        {"data": "data:text/plain;base64,QQ==", "name": "a.txt"},
    )


def item(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def added(item_id: str, status: str = "in_progress") -> dict[str, Any]:
    return item(
        "response.output_item.added", item={"type": "message", "id": item_id, "status": status}
    )


def delta(text: str) -> dict[str, Any]:
    return item("response.output_text.delta", delta=text)


def dropped(item_id: str) -> dict[str, Any]:
    return item(
        "response.output_item.done", item={"type": "message", "id": item_id, "status": "incomplete"}
    )


END = item("response.completed", response={"usage": {"input_tokens": 3, "output_tokens": 2}})


def texts(chunks: ChatChunks, events: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    out = [chunk for event in events for chunk in chunks.feed(event)]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in out if c.get("choices"))
    return said, out


def test_a_retried_reply_that_repeats_what_was_sent_streams_on_seamlessly() -> None:
    chunks = ChatChunks("resp_x", "m", 0, include_usage=True)
    said, out = texts(
        chunks,
        [
            item("response.created"),
            added("m1"),
            delta("Hel"),
            dropped("m1"),
            added("m1"),
            delta("Hello"),
            delta(" you"),
            END,
        ],
    )
    assert said == "Hello you"
    assert out[-2]["choices"][0]["finish_reason"] == "stop"
    assert out[-1]["choices"] == [] and out[-1]["usage"]["total_tokens"] == 5
    assert all("usage" in chunk for chunk in out)


def test_a_retried_reply_that_says_otherwise_ends_the_stream_with_an_error() -> None:
    chunks = ChatChunks("resp_x", "m", 0, include_usage=False)
    _, out = texts(chunks, [added("m1"), delta("Yes"), dropped("m1"), added("m1"), delta("No")])
    assert out[-1]["error"]["code"] == "reply_retracted" and chunks.ended
    assert chunks.feed(END) == []


def test_two_replies_are_joined_by_a_blank_line_and_calls_are_indexed() -> None:
    chunks = ChatChunks("resp_x", "m", 0, include_usage=False)
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
    said, out = texts(
        chunks,
        [
            added("m1"),
            delta("one"),
            item("response.mcp_call.in_progress", item_id="mcp_1"),
            added("m2"),
            delta("two"),
            item("response.output_item.added", item={**call, "arguments": ""}),
            item("response.function_call_arguments.delta", item_id="fc_1", delta="{}"),
            END,
        ],
    )
    assert said == "one\n\ntwo"
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in out
        if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert calls == [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}},
        {"index": 0, "function": {"arguments": "{}"}},
    ]
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"
