"""The planner, walked through every row of the crash-point table, and the history repair."""

from __future__ import annotations

import pytest

from app.worker.plan import (
    CUT_OFF_RESULT,
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
    recovery_delay,
    unique_tool_calls,
)
from tests.unit.entries import A, B, C, answer, calls, result, user

CAP = 20


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
