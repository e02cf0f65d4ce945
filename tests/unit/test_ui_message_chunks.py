"""The AI SDK's UI message stream renderer (`app/api/aisdk/chunks.py`) and the reading of useChat's
answers (`app/api/aisdk/requests.py`), walked without services (the chunks' acceptance by the AI
SDK's own parser is proven in tests/api/test_ai_sdk.py)."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.aisdk.chunks import UiMessageChunks, approval_id
from app.api.aisdk.requests import ToolPart, answers, conversation_of
from app.client.views import ActionView, Decision
from app.errors import InvalidRequest
from tests.unit.test_response_stream import Log, delta, message, start, turn

CLIENT = frozenset({"get_location", "agent_clarify"})
REPLY = "You are in Paris."


def render(
    items: list[Any], status: str = "completed", continues_after: int = 0, answered: int = 0
) -> list[dict[str, Any]]:
    chunks = UiMessageChunks(
        turn(status), CLIENT, continues_after=continues_after, answered_through=answered
    )
    out = chunks.begin()
    for item in items:
        out += chunks.feed(item)
    return out


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def test_a_reply_streamed_live_and_its_replay_make_the_same_message() -> None:
    log = Log()
    committed = log.event("message.committed", message(2, "assistant", REPLY))
    live = [
        *start(log),
        delta(2, "s1", 0, "You are "),
        delta(2, "s1", 1, "in Paris."),
        committed,
        log.event("turn.completed"),
    ]
    streamed = render(live)
    assert kinds(streamed) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]  # fmt: skip
    assert text_of(streamed) == REPLY and streamed[-1]["finishReason"] == "stop"
    replay = render([item for item in live if not hasattr(item, "fragments")])
    assert kinds(replay) == [
        "start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]  # fmt: skip
    assert text_of(replay) == REPLY
    assert replay[0] == streamed[0] == {"type": "start", "messageId": str(turn().id)}


def test_a_structured_answer_s_parsed_object_follows_its_text_as_a_data_part() -> None:
    log = Log()
    answer = message(2, "assistant", '{"kind": "bug"}', output={"kind": "bug"})
    chunks = render(
        [*start(log), log.event("message.committed", answer), log.event("turn.completed")]
    )
    assert kinds(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-end", "data-output",
        "finish-step", "finish",
    ]  # fmt: skip
    assert chunks[5] == {"type": "data-output", "id": "output-2", "data": {"kind": "bug"}}


def test_a_discarded_attempt_is_ended_and_marked_and_the_committed_one_is_a_new_part() -> None:
    log = Log()
    items = [
        *start(log),
        delta(2, "s1", 0, "You are in Lon"),
        delta(2, "s2", 0, "You are "),  # a retry: the first attempt is abandoned
        delta(2, "s2", 1, "in Paris."),
        log.event("message.committed", message(2, "assistant", REPLY)),
        log.event("turn.completed"),
    ]
    chunks = render(items)
    ends = [c for c in chunks if c["type"] == "text-end"]
    assert ends[0]["providerMetadata"] == {
        "chatworker": {"discarded": True, "reason": "the model call started over"}
    }
    assert "providerMetadata" not in ends[1] and ends[0]["id"] != ends[1]["id"]
    kept = [c for c in chunks if c.get("id") == ends[1]["id"] and c["type"] == "text-delta"]
    assert "".join(c["delta"] for c in kept) == REPLY


def test_a_pause_asks_for_approvals_and_ends_the_stream_with_tool_calls() -> None:
    log = Log()
    calls = [
        {"id": "c_loc", "name": "get_location", "arguments": "{}"},
        {"id": "c_erase", "name": "erase_notes", "arguments": '{"all": true}'},
    ]
    items = [
        *start(log),
        log.event("message.committed", message(2, "assistant", None, tool_calls=calls)),
        log.event("action.required"),
    ]
    chunks = UiMessageChunks(turn("requires_action"), CLIENT)
    out = chunks.begin()
    for item in items:
        out += chunks.feed(item)
    assert chunks.ended
    assert kinds(out) == [
        "start", "start-step",
        "tool-input-start", "tool-input-available", "tool-input-start", "tool-input-available",
        "tool-approval-request", "finish-step", "finish",
    ]  # fmt: skip
    assert "dynamic" not in out[2] and out[4]["dynamic"] is True  # a client tool is static
    assert out[5]["input"] == {"all": True}
    assert out[6] == {
        "type": "tool-approval-request",
        "approvalId": approval_id("c_erase"),
        "toolCallId": "c_erase",
    }
    assert out[-1] == {"type": "finish", "finishReason": "tool-calls"}


def test_the_stream_after_the_answers_writes_what_the_client_does_not_hold() -> None:
    log = Log()
    calls = [
        {"id": "c_loc", "name": "get_location", "arguments": "{}"},
        {"id": "c_erase", "name": "erase_notes", "arguments": "{}"},
    ]
    items = [
        *start(log),
        log.event("message.committed", message(2, "assistant", None, tool_calls=calls)),
        pause := log.event("action.required"),
        log.event(
            "message.committed", message(3, "tool", '{"city": "Paris"}', tool_call_id="c_loc")
        ),
        log.event("message.committed", message(4, "tool", "Denied.", tool_call_id="c_erase")),
        log.event("turn.resumed"),
        log.event("message.committed", message(5, "assistant", REPLY)),
        log.event("turn.completed"),
    ]  # fmt: skip
    continued = render(items, continues_after=pause.seq, answered=pause.seq)
    assert kinds(continued) == [
        "start", "tool-output-denied", "start-step", "text-start", "text-delta", "text-end",
        "finish-step", "finish",
    ]  # fmt: skip
    # a replay of the whole turn (a resume) goes through the answered pause, and writes the
    # client's answer too, as JSON
    replay = render(items, answered=pause.seq)
    (answer,) = [c for c in replay if c["type"] == "tool-output-available"]
    assert answer == {
        "type": "tool-output-available",
        "toolCallId": "c_loc",
        "output": {"city": "Paris"},
    }
    assert kinds(replay).count("finish") == 1  # the end's: the pause is history
    # the same log read when the turn still waited: the pause ends the stream
    assert kinds(render(items))[-3:] == ["tool-approval-request", "finish-step", "finish"]


def test_a_worker_s_tool_results_and_errors() -> None:
    log = Log()
    calls = [
        {"id": "c_add", "name": "add", "arguments": '{"a": 1}'},
        {"id": "c_bad", "name": "add", "arguments": "not json"},
    ]
    failed = message(4, "tool", "a is missing", tool_call_id="c_bad")
    items = [
        *start(log),
        log.event("message.committed", message(2, "assistant", None, tool_calls=calls)),
        log.event("message.committed", message(3, "tool", "1.0", tool_call_id="c_add")),
        log.event("message.committed", failed.__class__(**{**failed.__dict__, "is_error": True})),
        log.event("message.committed", message(5, "assistant", "Done.")),
        log.event("turn.completed"),
    ]
    chunks = render(items)
    outputs = [c for c in chunks if c["type"].startswith("tool-output")]
    assert outputs == [
        {"type": "tool-output-available", "toolCallId": "c_add", "output": "1.0"},
        {"type": "tool-output-error", "toolCallId": "c_bad", "errorText": "a is missing"},
    ]
    assert [c["input"] for c in chunks if c["type"] == "tool-input-available"] == [
        {"a": 1},
        "not json",
    ]
    # one step per model call: the tools' results end the first
    assert kinds(chunks).count("start-step") == 2 == kinds(chunks).count("finish-step")


@pytest.mark.parametrize(
    ("event", "ending"),
    [
        ("turn.failed", ["error", "finish"]),
        ("turn.cancelled", ["abort", "finish"]),
    ],
)
def test_a_failed_or_cancelled_turn_ends_its_stream(event: str, ending: list[str]) -> None:
    log = Log()
    items = [*start(log), delta(2, "s1", 0, "Half"), log.event(event)]
    chunks = render(items, status="failed" if event == "turn.failed" else "cancelled")
    assert kinds(chunks)[-len(ending) :] == ending
    (end,) = [c for c in chunks if c["type"] == "text-end"]
    assert end["providerMetadata"]["chatworker"]["discarded"] is True  # the half reply
    assert chunks[-1]["finishReason"] == ("error" if event == "turn.failed" else "other")


# --- useChat's answers ---------------------------------------------------------------------------


WAITING = [
    ActionView("c_loc", "client_tool", "get_location", {}),
    ActionView("c_erase", "approval", "erase_notes", {}),
]


APPROVED = {"id": approval_id("c_loc"), "approved": True}
FORGED = {"id": "forged", "approved": True}


def test_answers_are_read_from_the_parts_of_the_calls_that_wait() -> None:
    parts = [
        ToolPart("c_add", "add", "output-available", "5.0"),  # answered before: ignored
        ToolPart("c_loc", "get_location", "output-available", {"city": "Paris"}),
        ToolPart(
            "c_erase",
            "erase_notes",
            "approval-responded",
            approval={"id": approval_id("c_erase"), "approved": False, "reason": "no"},
        ),
    ]
    outputs, approvals = answers(parts, WAITING)
    assert outputs == {"c_loc": '{"city": "Paris"}'}
    assert approvals == {"c_erase": Decision(False, "no")}
    errors, _ = answers(
        [ToolPart("c_loc", "get_location", "output-error", error_text="no GPS")], WAITING
    )
    assert errors == {"c_loc": "Error: no GPS"}


@pytest.mark.parametrize(
    ("part", "says"),
    [
        (
            ToolPart(
                "c_loc",
                "get_location",
                "approval-responded",
                approval={"id": approval_id("c_loc"), "approved": True},
            ),
            "waits for no approval",
        ),
        (
            ToolPart(
                "c_erase",
                "erase_notes",
                "approval-responded",
                approval={"id": "forged", "approved": True},
            ),
            "is not the one asked",
        ),
        (ToolPart("c_erase", "erase_notes", "output-available", "done"), "not an output"),
        (ToolPart("c_other", "add", "output-available", "5"), "answers none of the calls"),
    ],
)
def test_bad_answers_are_refused(part: ToolPart, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        answers([part], WAITING)


def test_a_chat_id_names_a_conversation_per_owner_and_ours_name_themselves() -> None:
    assert conversation_of("alice", "abc") == conversation_of("alice", "abc")
    assert conversation_of("alice", "abc") != conversation_of("bob", "abc")
    ours = "0b3a3d0e-3c1d-4a8e-9f52-6a1d2c3b4e5f"
    assert str(conversation_of("alice", ours)) == ours
