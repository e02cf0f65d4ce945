"""The planner, walked through every row of the crash-point table, and the history repair."""

from __future__ import annotations

import json

import pytest

from app.worker.plan import (
    CUT_OFF_RESULT,
    INTERRUPTED_RESULT,
    MAX_ITERATIONS_ERROR,
    NO_USER_MESSAGE_ERROR,
    CallModel,
    Entry,
    Fail,
    Finish,
    RunTools,
    ToolCall,
    check_call,
    next_action,
    provider_messages,
    recovery_delay,
    tool_call_ids,
    unique_tool_calls,
)

CAP = 20
A = ToolCall("call_a", "search_docs", '{"query": "redis"}')
B = ToolCall("call_b", "add", '{"a": 1, "b": 2}')
C = ToolCall("call_c", "write_note", '{"text": "hi"}')


def user(seq: int, text: str = "question") -> Entry:
    return Entry(seq, "user", text)


def calls(seq: int, *tool_calls: ToolCall) -> Entry:
    return Entry(seq, "assistant", None, tool_calls)


def result(seq: int, call: ToolCall, text: str = "ok", is_error: bool = False) -> Entry:
    return Entry(seq, "tool", text, tool_call_id=call.id, tool_name=call.name, is_error=is_error)


def answer(seq: int, text: str = "the answer") -> Entry:
    return Entry(seq, "assistant", text)


# One row per line of the crash-point table: (committed transcript, expected next action).
CRASH_POINTS = {
    "after submit, before pickup": ([user(1)], CallModel()),
    "before or during the LLM call": ([user(1)], CallModel()),
    "after assistant tool calls committed": (
        [user(1), calls(2, A, B, C)],
        RunTools((A, B, C)),
    ),
    "during tool execution, first result committed": (
        [user(1), calls(2, A, B, C), result(3, A)],
        RunTools((B, C)),
    ),
    "during tool execution, two results committed": (
        [user(1), calls(2, A, B, C), result(3, A), result(4, B)],
        RunTools((C,)),
    ),
    "after all tool results committed": (
        [user(1), calls(2, A, B, C), result(3, A), result(4, B), result(5, C)],
        CallModel(),
    ),
    "after the final assistant text": (
        [user(1), calls(2, A), result(3, A), answer(4)],
        Finish(),
    ),
}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_point_table(point: str) -> None:
    transcript, expected = CRASH_POINTS[point]
    assert next_action(transcript, iterations=1, max_iterations=CAP) == expected


def test_walking_a_whole_turn_step_by_step() -> None:
    """Apply each action's committed outcome and check the next decision, like a replay."""
    transcript: list[Entry] = [user(1)]
    assert next_action(transcript, 0, CAP) == CallModel()
    transcript.append(calls(2, A, B))
    assert next_action(transcript, 1, CAP) == RunTools((A, B))
    transcript.append(result(3, A))
    assert next_action(transcript, 1, CAP) == RunTools((B,))
    transcript.append(result(4, B, "boom", is_error=True))
    assert next_action(transcript, 1, CAP) == CallModel()
    transcript.append(calls(5, C))
    assert next_action(transcript, 2, CAP) == RunTools((C,))
    transcript.append(result(6, C))
    assert next_action(transcript, 2, CAP) == CallModel()
    transcript.append(answer(7))
    assert next_action(transcript, 3, CAP) == Finish()


def test_results_out_of_call_order_still_leave_only_the_unanswered() -> None:
    transcript = [user(1), calls(2, A, B, C), result(3, C), result(4, A)]
    assert next_action(transcript, 1, CAP) == RunTools((B,))


def test_the_21st_llm_call_fails_the_turn() -> None:
    transcript = [user(1), calls(2, A), result(3, A)]
    assert next_action(transcript, iterations=19, max_iterations=CAP) == CallModel()
    assert next_action(transcript, iterations=20, max_iterations=CAP) == Fail(MAX_ITERATIONS_ERROR)


def test_pending_tools_still_run_at_the_cap() -> None:
    # The 20th call asked for tools: their results are committed before the turn fails.
    transcript = [user(1), calls(2, A)]
    assert next_action(transcript, iterations=20, max_iterations=CAP) == RunTools((A,))


def test_a_final_answer_at_the_cap_finishes() -> None:
    assert next_action([user(1), answer(2)], iterations=20, max_iterations=CAP) == Finish()


def test_no_user_message_fails() -> None:
    assert next_action([], 0, CAP) == Fail(NO_USER_MESSAGE_ERROR)
    assert next_action([answer(1)], 0, CAP) == Fail(NO_USER_MESSAGE_ERROR)


def test_a_new_user_message_starts_a_new_turn_past_an_old_dangling_call() -> None:
    # A failed turn left call A unanswered; the user wrote again: answer the new message.
    transcript = [user(1), calls(2, A), user(3, "never mind")]
    assert next_action(transcript, 0, CAP) == CallModel()


def test_a_finished_earlier_turn_does_not_finish_the_new_one() -> None:
    transcript = [user(1), answer(2), user(3, "and then?")]
    assert next_action(transcript, 0, CAP) == CallModel()


def test_planning_is_pure() -> None:
    transcript = [user(1), calls(2, A, B), result(3, A)]
    snapshot = list(transcript)
    assert next_action(transcript, 1, CAP) == next_action(transcript, 1, CAP)
    assert transcript == snapshot


# --- tool call ids ------------------------------------------------------------------------------


def test_model_ids_are_kept_when_unique() -> None:
    assert unique_tool_calls([A, B], used_ids=set(), seq=2) == (A, B)


def test_empty_and_repeated_ids_get_unique_ones() -> None:
    reused = ToolCall("call_0", "add", "{}")
    normalized = unique_tool_calls(
        [reused, ToolCall("", "add", "{}"), ToolCall("call_0", "add", "{}")],
        used_ids={"call_0"},
        seq=7,
    )
    ids = [call.id for call in normalized]
    assert ids == ["call_7_0", "call_7_1", "call_7_2"]
    assert [call.name for call in normalized] == ["add"] * 3


def test_generated_ids_avoid_ids_already_taken() -> None:
    normalized = unique_tool_calls([ToolCall("", "add", "{}")], used_ids={"call_7_0"}, seq=7)
    assert normalized[0].id not in {"call_7_0", ""}


def test_tool_call_ids_of_a_transcript() -> None:
    assert tool_call_ids([user(1), calls(2, A, B), result(3, A), calls(4, C)]) == {
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


# --- model-fixable mistakes go back to the model, a bounded number of times ----------------------


def failed(seq: int, call: ToolCall) -> Entry:
    return result(seq, call, "Error: bad arguments", is_error=True)


def test_one_round_of_errors_goes_back_to_the_model() -> None:
    transcript = [user(1), calls(2, A), failed(3, A)]
    assert next_action(transcript, 1, CAP) == CallModel()


def test_three_rounds_of_only_errors_fail_the_turn() -> None:
    transcript = [
        user(1),
        calls(2, A),
        failed(3, A),
        calls(4, B),
        failed(5, B),
        calls(6, C),
        failed(7, C),
    ]
    action = next_action(transcript, 3, CAP)
    assert isinstance(action, Fail)
    assert action.error.startswith("The model's tool calls failed 3 rounds in a row")
    assert "bad arguments" in action.error


def test_a_round_with_one_success_resets_the_count() -> None:
    mixed = [user(1), calls(2, A), failed(3, A), calls(4, A, B), failed(5, A), result(6, B)]
    transcript = [*mixed, calls(7, C), failed(8, C), calls(9, A), failed(10, A)]
    assert next_action(transcript, 5, CAP) == CallModel()


def test_errors_of_an_earlier_turn_do_not_count() -> None:
    earlier = [user(1), calls(2, A), failed(3, A), calls(4, B), failed(5, B), answer(6)]
    transcript = [*earlier, user(7), calls(8, C), failed(9, C)]
    assert next_action(transcript, 1, CAP) == CallModel()


def test_the_cap_is_configurable() -> None:
    transcript = [user(1), calls(2, A), failed(3, A)]
    assert isinstance(next_action(transcript, 1, CAP, max_error_rounds=1), Fail)


def test_a_call_cut_off_by_the_length_limit_is_not_run() -> None:
    complete_looking = ToolCall("c1", "add", '{"a": 1, "b": 2}')
    assert check_call(complete_looking, {"add"}, {"add"}, cut_off=True) == CUT_OFF_RESULT
    assert check_call(complete_looking, {"add"}, {"add"}) == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall("c", "add", ""), {}),
        (ToolCall("c", "add", "  "), {}),
        (ToolCall("c", "nope", "{}"), "Unknown tool: nope"),
        (ToolCall("c", "secret", "{}"), "Tool secret is not allowed"),
        (ToolCall("c", "add", "{"), "not valid JSON"),
        (ToolCall("c", "add", '"text"'), "expected a JSON object, got str"),
    ],
)
def test_check_call(call: ToolCall, expected: object) -> None:
    checked = check_call(call, offered={"add"}, known={"add", "secret"})
    if isinstance(expected, str):
        assert isinstance(checked, str) and expected in checked
    else:
        assert checked == expected


def test_a_lost_doorbell_is_resent_at_once_and_crashed_turns_spread_out() -> None:
    assert recovery_delay(0, 0.99) == 0.0  # never claimed: nothing crashed
    assert recovery_delay(1, 0.5) == 0.5
    assert recovery_delay(2, 0.5) == 1.0
    assert recovery_delay(3, 0.999) < 4.0
    assert recovery_delay(50, 0.999) < 8.0  # capped
