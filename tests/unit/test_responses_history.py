"""A stateless Responses input read against what the server returned (app/api/responses/history.py):
the last item of ours, and the new items after it.

| input                                               | read as                                  |
|-----------------------------------------------------|------------------------------------------|
| a user message only                                 | no anchor; the message is new            |
| system/developer messages, then a user message      | no anchor; the instructions, the message |
| user, function_call (call_id), function_call_output | anchor: the call; new: the output        |
| ..., our assistant message (msg_ id), user message  | anchor: that reply; new: the message     |
| ..., item_reference to fc_/msg_, new items          | the same, by reference                   |
| reasoning items anywhere                            | passed over                              |
| an assistant message without an id of ours, and no  | written elsewhere: the items before the  |
| item of ours after it                               | last user messages copied (`earlier`)    |
| such a history ending with no user message          | 400 naming its last item                 |
| an item_reference to an id we never return          | 400 naming it                            |
| an item_reference to a response id                  | 400: give it as previous_response_id     |
"""

from __future__ import annotations

import uuid

import pytest

from app.api.responses.errors import Unsupported
from app.api.responses.history import Anchor, imported, read_history

TURN = uuid.UUID("0123456789abcdef0123456789abcdef")
USER = {"role": "user", "content": "What is the weather in Oslo?"}
CALL = {
    "type": "function_call",
    "id": "fc_call_1",
    "call_id": "call_1",
    "name": "weather",
    "arguments": '{"city": "Oslo"}',
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "Rain"}
REPLY = {
    "type": "message",
    "role": "assistant",
    "id": f"msg_{TURN.hex}_4",
    "content": [{"type": "output_text", "text": "It rains."}],
}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}


def test_a_user_message_alone_is_new() -> None:
    history = read_history([USER])
    assert history.anchor is None and history.new == [(0, USER)]
    assert history.instructions is None


def test_system_and_developer_messages_of_a_new_conversation_are_its_instructions() -> None:
    system = {"role": "system", "content": "Be brief."}
    developer = {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Answer in French."}],
    }
    history = read_history([system, developer, USER])
    assert history.anchor is None and history.new == [(2, USER)]
    assert history.instructions == "Be brief.\n\nAnswer in French."


def test_a_tool_loop_s_history_continues_at_its_call_with_the_output_new() -> None:
    history = read_history([USER, REASONING, CALL, OUTPUT])
    assert history.anchor == Anchor("input[2]", call_id="call_1")
    assert history.new == [(3, OUTPUT)]


def test_a_reply_of_ours_then_a_user_message_is_the_next_turn() -> None:
    again = {"role": "user", "content": "And tomorrow?"}
    history = read_history([USER, CALL, OUTPUT, REPLY, again])
    assert history.anchor == Anchor("input[3]", turn_id=TURN, seq=4)
    assert history.new == [(4, again)]


@pytest.mark.parametrize(
    ("reference", "anchor"),
    [
        ("fc_call_1", Anchor("input[1]", call_id="call_1")),
        (f"msg_{TURN.hex}_4", Anchor("input[1]", turn_id=TURN, seq=4)),
        ("mcpr_call_9", Anchor("input[1]", call_id="call_9")),
    ],
)
def test_an_item_reference_names_the_item_it_stands_for(reference: str, anchor: Anchor) -> None:
    history = read_history([USER, {"type": "item_reference", "id": reference}, OUTPUT])
    assert history.anchor == anchor and history.new == [(2, OUTPUT)]


def test_a_function_call_without_its_id_is_found_by_its_call_id() -> None:
    call = {key: value for key, value in CALL.items() if key != "id"}
    assert read_history([USER, call, OUTPUT]).anchor == Anchor("input[1]", call_id="call_1")


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"type": "item_reference", "id": "ext_42"}, "which this server did not return"),
        ({"type": "item_reference", "id": f"resp_{TURN.hex}"}, "give it as previous_response_id"),
        ({"type": "item_reference"}, "must be an item id"),
        ({"type": "function_call", "name": "weather"}, "needs its id or call_id"),
    ],
)
def test_an_item_that_is_not_ours_is_refused_naming_it(item: dict[str, object], says: str) -> None:
    with pytest.raises(Unsupported, match=says) as refused:
        read_history([USER, item, OUTPUT])
    assert refused.value.param == "input[1]"


ELSEWHERE = {"role": "assistant", "content": "It rained yesterday."}  # (no id of ours)


@pytest.mark.parametrize("written", [ELSEWHERE, {**REPLY, "id": "msg_from_another_provider"}])
def test_a_history_written_elsewhere_is_copied_before_its_last_user_messages(
    written: dict[str, object],
) -> None:
    later = {"role": "user", "content": "And today?"}
    system = {"role": "system", "content": "Be brief."}
    history = read_history([system, USER, CALL, OUTPUT, written, later, later])
    assert history.anchor is None and history.instructions == "Be brief."
    assert [index for index, _ in history.earlier] == [1, 2, 3, 4]
    assert history.new == [(5, later), (6, later)]
    assert imported(history.earlier) == [
        {"role": "user", "content": USER["content"]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "name": "weather", "arguments": '{"city": "Oslo"}'}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Rain"},
        {
            "role": "assistant",
            "content": written["content"] if isinstance(written["content"], str) else "It rains.",
        },
    ]


def test_an_item_of_ours_after_a_reply_written_elsewhere_is_the_anchor() -> None:
    later = {"role": "user", "content": "And today?"}
    history = read_history([USER, ELSEWHERE, later, REPLY, later])
    assert history.anchor == Anchor("input[3]", turn_id=TURN, seq=4) and not history.earlier


@pytest.mark.parametrize(
    ("items", "says", "where"),
    [
        ([USER, ELSEWHERE], "must end with a user message", "input[1]"),
        (
            [USER, ELSEWHERE, {"type": "web_search_call", "id": "ws_1"}, USER],
            "cannot be copied",
            "input[2]",
        ),
        (
            [
                {"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]},
                ELSEWHERE,
                USER,
            ],
            "text only",
            "input[0]",
        ),
    ],
)
def test_a_history_written_elsewhere_that_cannot_be_copied_is_refused(
    items: list[object], says: str, where: str
) -> None:
    with pytest.raises(Unsupported, match=says) as refused:
        history = read_history(items)
        imported(history.earlier)
    assert refused.value.param == where
