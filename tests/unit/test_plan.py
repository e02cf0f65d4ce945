"""The planner, walked through every row of its table: the crash points, the tool checks, the
model's odd replies, the caps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.worker.offer import (
    CUT_OFF_RESULT,
    NO_TOOLS,
    Toolbox,
    check_call,
    tool_choice,
    toolbox,
    uses_tools,
)
from app.worker.plan import (
    CANCELLED_RESULT,
    GAVE_UP_ERROR,
    MAX_ITERATIONS_ERROR,
    NO_USER_MESSAGE_ERROR,
    Entry,
    ToolCall,
    current_turn,
    next_step,
    on_claim,
    over_budget,
    pending_calls,
    recovery_delay,
)
from app.worker.steps import (
    CallModel,
    Cancel,
    Fail,
    Finish,
    RejectCall,
    RunOwnTool,
    RunTool,
    Step,
    TakeSteer,
)
from app.worker.verdict import (
    CONTENT_FILTER_ERROR,
    EMPTY_REPLY_ERROR,
    RecordAnswer,
    RecordCalls,
    judge_reply,
    model_failed,
    unique_tool_calls,
)
from tests.unit.entries import A, B, C, answer, calls, result, user

CAP = 20
TOOLS = toolbox(allowed={A.name, B.name, C.name}, available={A.name, B.name, C.name})


def plan(transcript: list[Entry], iterations: int = 1, max_error_rounds: int | None = None) -> Step:
    """The planner's next action for a turn that may call A, B and C."""
    if max_error_rounds is None:
        return next_step(transcript, iterations, CAP, tools=TOOLS)
    return next_step(transcript, iterations, CAP, max_error_rounds, tools=TOOLS)


def runs(call: ToolCall) -> RunTool:
    return RunTool(call, json.loads(call.arguments))


def pending(transcript: list[Entry]) -> tuple[ToolCall, ...]:
    return pending_calls(current_turn(transcript))


# One row per line of the crash-point table: (committed transcript, expected next action, the
# calls still to run, in order: each runs as its own step, and only those).
CRASH_POINTS = {
    "after submit, before pickup": ([user(1)], CallModel(), ()),
    "before or during the LLM call": ([user(1)], CallModel(), ()),
    "after assistant tool calls committed": (
        [user(1), calls(2, A, B, C)],
        runs(A),
        (A, B, C),
    ),
    "during tool execution, first result committed": (
        [user(1), calls(2, A, B, C), result(3, A)],
        runs(B),
        (B, C),
    ),
    "during tool execution, two results committed": (
        [user(1), calls(2, A, B, C), result(3, A), result(4, B)],
        runs(C),
        (C,),
    ),
    "after all tool results committed": (
        [user(1), calls(2, A, B, C), result(3, A), result(4, B), result(5, C)],
        CallModel(),
        (),
    ),
    "after the final assistant text": (
        [user(1), calls(2, A), result(3, A), answer(4)],
        Finish(),
        (),
    ),
}


@pytest.mark.row(2, 5, 9)
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_point_table(point: str) -> None:
    transcript, expected, still_to_run = CRASH_POINTS[point]
    assert next_step(transcript, iterations=1, max_iterations=CAP, tools=TOOLS) == expected
    assert pending(transcript) == still_to_run


@pytest.mark.row(2, 5, 9)
def test_walking_a_whole_turn_step_by_step() -> None:
    """Apply each action's committed outcome and check the next decision, like a replay."""
    transcript: list[Entry] = [user(1)]
    assert plan(transcript, 0) == CallModel()
    transcript.append(calls(2, A, B))
    assert plan(transcript, 1) == runs(A)
    transcript.append(result(3, A))
    assert plan(transcript, 1) == runs(B)
    transcript.append(result(4, B, "boom", is_error=True))
    assert plan(transcript, 1) == CallModel()
    transcript.append(calls(5, C))
    assert plan(transcript, 2) == runs(C)
    transcript.append(result(6, C))
    assert plan(transcript, 2) == CallModel()
    transcript.append(answer(7))
    assert plan(transcript, 3) == Finish()


@pytest.mark.row(5)
def test_results_out_of_call_order_still_leave_only_the_unanswered() -> None:
    transcript = [user(1), calls(2, A, B, C), result(3, C), result(4, A)]
    assert plan(transcript) == runs(B)
    assert pending(transcript) == (B,)


@pytest.mark.row(7, 9)
def test_the_21st_llm_call_fails_the_turn() -> None:
    transcript = [user(1), calls(2, A), result(3, A)]
    assert next_step(transcript, iterations=19, max_iterations=CAP) == CallModel()
    assert next_step(transcript, iterations=20, max_iterations=CAP) == Fail(MAX_ITERATIONS_ERROR)


@pytest.mark.row(5, 7)
def test_pending_tools_still_run_at_the_cap() -> None:
    # The 20th call asked for tools: their results are committed before the turn fails.
    transcript = [user(1), calls(2, A)]
    assert next_step(transcript, iterations=20, max_iterations=CAP, tools=TOOLS) == runs(A)


@pytest.mark.row(2)
def test_a_final_answer_at_the_cap_finishes() -> None:
    assert next_step([user(1), answer(2)], iterations=20, max_iterations=CAP) == Finish()


@pytest.mark.row(4)
def test_no_user_message_fails() -> None:
    assert next_step([], 0, CAP) == Fail(NO_USER_MESSAGE_ERROR)
    assert next_step([answer(1)], 0, CAP) == Fail(NO_USER_MESSAGE_ERROR)


@pytest.mark.row(9)
def test_a_new_user_message_starts_a_new_turn_past_an_old_dangling_call() -> None:
    # A failed turn left call A unanswered; the user wrote again: answer the new message.
    transcript = [user(1), calls(2, A), user(3, "never mind")]
    assert next_step(transcript, 0, CAP) == CallModel()


@pytest.mark.row(26)
def test_a_waiting_steer_message_is_taken_in_only_where_the_model_would_be_called() -> None:
    def steered(transcript: list[Entry], **kwargs: object) -> Step:
        return next_step(transcript, 1, CAP, tools=TOOLS, steer_waiting=True, **kwargs)  # type: ignore[arg-type]

    # every call answered (or the turn just began): the message goes in before the model call
    assert steered([user(1), calls(2, A), result(3, A)]) == TakeSteer()
    assert steered([user(1)]) == TakeSteer()
    # calls still to run run first; the answer ends the turn and leaves the message to run next
    assert steered([user(1), calls(2, A, B), result(3, A)]) == runs(B)
    assert steered([user(1), answer(2)]) == Finish()
    # a cancel, and a cap reached, come first
    assert steered([user(1), calls(2, A), result(3, A)], cancel_requested=True) == Cancel()
    capped = next_step([user(1)], CAP, CAP, tools=TOOLS, steer_waiting=True)
    assert capped == Fail(MAX_ITERATIONS_ERROR)
    # nothing waiting: the model as ever
    assert plan([user(1), calls(2, A), result(3, A)]) == CallModel()
    # taken in, the message is the new turn's user message: the model is called for it
    assert plan([user(1), calls(2, A), result(3, A), user(4, "only the first")]) == CallModel()


@pytest.mark.row(2, 9)
def test_a_finished_earlier_turn_does_not_finish_the_new_one() -> None:
    transcript = [user(1), answer(2), user(3, "and then?")]
    assert next_step(transcript, 0, CAP) == CallModel()


@pytest.mark.row(5)
def test_planning_is_pure() -> None:
    transcript = [user(1), calls(2, A, B), result(3, A)]
    snapshot = list(transcript)
    assert next_step(transcript, 1, CAP) == next_step(transcript, 1, CAP)
    assert transcript == snapshot


# --- a cancelled turn (row 3) ---------------------------------------------------------------------


def cancelled(transcript: list[Entry], iterations: int = 1) -> Step:
    return next_step(transcript, iterations, CAP, tools=TOOLS, cancel_requested=True)


@pytest.mark.row(3)
def test_a_cancel_during_the_model_call_cancels_the_turn() -> None:
    assert cancelled([user(1)]) == Cancel()


@pytest.mark.row(3)
def test_a_cancel_answers_every_unanswered_call_in_order_before_the_turn_ends() -> None:
    """Walked like a replay: each rejected call is one committed step, then the turn ends."""
    transcript: list[Entry] = [user(1), calls(2, A, B, C), result(3, A)]
    assert cancelled(transcript) == RejectCall(B, CANCELLED_RESULT)
    transcript.append(result(4, B, CANCELLED_RESULT, is_error=True))
    assert cancelled(transcript) == RejectCall(C, CANCELLED_RESULT)
    transcript.append(result(5, C, CANCELLED_RESULT, is_error=True))
    assert cancelled(transcript) == Cancel()


@pytest.mark.row(3)
def test_a_cancel_overrides_the_caps_and_the_checks() -> None:
    # Nothing runs once a cancel is requested: not even a call that would only be rejected.
    assert cancelled([user(1), calls(2, A)], iterations=CAP) == RejectCall(A, CANCELLED_RESULT)
    assert cancelled([user(1), calls(2, A), result(3, A)], iterations=CAP) == Cancel()
    assert cancelled([]) == Cancel()


@pytest.mark.row(2, 3)
def test_an_answer_committed_before_the_cancel_stays_completed() -> None:
    assert cancelled([user(1), calls(2, A), result(3, A), answer(4)]) == Finish()


@pytest.mark.row(1, 3)
def test_a_cancelled_turn_is_not_given_up_on_at_its_claim() -> None:
    assert on_claim(attempts=4, max_attempts=3, cancel_requested=True) is None


# --- tool call ids ------------------------------------------------------------------------------


@pytest.mark.row(12)
def test_model_ids_are_kept_when_unique() -> None:
    assert unique_tool_calls([A, B], used_ids=set(), seq=2) == (A, B)


@pytest.mark.row(12)
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


@pytest.mark.row(12)
def test_generated_ids_avoid_ids_already_taken() -> None:
    normalized = unique_tool_calls([ToolCall("", "add", "{}")], used_ids={"call_7_0"}, seq=7)
    assert normalized[0].id not in {"call_7_0", ""}


# --- model-fixable mistakes go back to the model, a bounded number of times ----------------------


def failed(seq: int, call: ToolCall) -> Entry:
    return result(seq, call, "Error: bad arguments", is_error=True)


@pytest.mark.row(6, 9)
def test_one_round_of_errors_goes_back_to_the_model() -> None:
    transcript = [user(1), calls(2, A), failed(3, A)]
    assert next_step(transcript, 1, CAP) == CallModel()


@pytest.mark.row(6)
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
    action = next_step(transcript, 3, CAP)
    assert isinstance(action, Fail)
    assert action.error.startswith("The model's tool calls failed 3 rounds in a row")
    assert "bad arguments" in action.error


@pytest.mark.row(6)
def test_a_round_with_one_success_resets_the_count() -> None:
    mixed = [user(1), calls(2, A), failed(3, A), calls(4, A, B), failed(5, A), result(6, B)]
    transcript = [*mixed, calls(7, C), failed(8, C), calls(9, A), failed(10, A)]
    assert next_step(transcript, 5, CAP) == CallModel()


@pytest.mark.row(6)
def test_errors_of_an_earlier_turn_do_not_count() -> None:
    earlier = [user(1), calls(2, A), failed(3, A), calls(4, B), failed(5, B), answer(6)]
    transcript = [*earlier, user(7), calls(8, C), failed(9, C)]
    assert next_step(transcript, 1, CAP) == CallModel()


@pytest.mark.row(6)
def test_the_cap_is_configurable() -> None:
    transcript = [user(1), calls(2, A), failed(3, A)]
    assert isinstance(next_step(transcript, 1, CAP, max_error_rounds=1), Fail)
    assert isinstance(plan(transcript, max_error_rounds=1), Fail)
    assert plan(transcript, max_error_rounds=2) == CallModel()


@pytest.mark.row(5)
def test_a_call_cut_off_by_the_length_limit_is_not_run() -> None:
    complete_looking = ToolCall("c1", "add", '{"a": 1, "b": 2}')
    assert check_call(complete_looking, {"add"}, {"add"}, cut_off=True) == CUT_OFF_RESULT
    assert check_call(complete_looking, {"add"}, {"add"}) == {"a": 1, "b": 2}


@pytest.mark.row(5)
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


# --- the rows around tool calls: each pending call is a step of its own -------------------------


@pytest.mark.row(5)
def test_a_call_whose_reply_was_cut_off_is_rejected_not_run() -> None:
    cut = Entry(2, "assistant", None, (A, B), finish_reason="length")
    transcript = [user(1), cut]
    assert plan(transcript) == RejectCall(A, CUT_OFF_RESULT)
    transcript.append(result(3, A, CUT_OFF_RESULT, is_error=True))
    assert plan(transcript) == RejectCall(B, CUT_OFF_RESULT)


@pytest.mark.row(5, 16)
def test_a_tool_not_offered_is_rejected_even_when_the_worker_has_it() -> None:
    only_a = toolbox(allowed={A.name}, available={A.name, B.name})
    transcript = [user(1), calls(2, B)]
    action = next_step(transcript, 1, CAP, tools=only_a)
    assert action == RejectCall(B, "Tool add is not allowed in this conversation.")
    unknown = next_step(transcript, 1, CAP, tools=NO_TOOLS)
    assert isinstance(unknown, RejectCall) and unknown.error.startswith("Unknown tool: add")


@pytest.mark.row(5)
@pytest.mark.parametrize("arguments", ["[1, 2]", '"x"', "3", "null", "{"])
def test_arguments_that_are_not_a_json_object_are_rejected(arguments: str) -> None:
    bad = ToolCall("call_bad", B.name, arguments)
    action = plan([user(1), calls(2, bad)])
    assert isinstance(action, RejectCall) and action.call == bad
    assert action.error.startswith("Invalid arguments for add")


@pytest.mark.row(15, 16)
def test_tools_are_offered_only_when_allowed_and_not_switched_off() -> None:
    assert uses_tools(["add"], "auto") and uses_tools(["add"], "required")
    assert not uses_tools([], "auto")
    assert not uses_tools(["add"], "none")
    box = toolbox(allowed=["add", "gone"], available=["add", "search_docs"])
    assert box == Toolbox(
        offered=frozenset({"add"}),
        known=frozenset({"add", "search_docs"}),
        served=frozenset({"add"}),
    )


@pytest.mark.row(16, 17)
def test_a_server_s_tool_named_like_one_of_the_worker_s_own_is_not_served() -> None:
    box = toolbox(
        allowed=["add", "agent_clarify", "locate"],
        available=["add", "agent_clarify", "locate"],
        action_kinds={"locate": "client_tool"},
        reserved=["agent_clarify"],
    )
    assert box.served == {"add"}
    assert box.offered == {"add", "locate"}  # the client's `locate`, never run
    assert box.own == frozenset()


@pytest.mark.row(18)
def test_the_session_cache_s_readers_are_offered_beside_a_server_s_tool_while_the_cache_is_on() -> (
    None
):
    readers = ["session_cache_list", "session_cache_get"]
    beside = toolbox(["add"], ["add"], cache=readers)
    assert beside.offered == {"add", *readers} and beside.own == set(readers)
    assert toolbox(["add"], ["add"], cache=readers, session_cache=False).own == frozenset()
    alone = toolbox([], ["add"], action_kinds={"locate": "client_tool"}, cache=readers)
    assert alone.offered == {"locate"} and alone.own == frozenset()


# --- what the model must call ---------------------------------------------------------------------

FORCED = {"type": "function", "function": {"name": "add"}}


@pytest.mark.row(31)
def test_a_forced_choice_binds_the_turn_s_first_model_call() -> None:
    first = [user(1)]
    assert tool_choice("required", None, {"add"}, first) == "required"
    assert tool_choice("required", "add", {"add", "search_docs"}, first) == FORCED
    # a later turn's first call, after earlier turns' tool results: forced again
    later = [user(1), calls(2, B), result(3, B), answer(4), user(5)]
    assert tool_choice("required", "add", {"add"}, later) == FORCED
    # a repair of a refused answer has no tool result either: still forced
    assert tool_choice("required", None, {"add"}, [user(1), answer(2)]) == "required"


@pytest.mark.row(32)
def test_once_the_turn_has_a_tool_result_the_model_is_free_to_answer() -> None:
    """Forced again, a server's tool would be called on every model call until the turn's
    iteration limit: `required` and a named tool both become `auto`, whatever answered the
    call (a server's tool, a client's output, an approval's result)."""
    after = [user(1), calls(2, B), result(3, B)]
    assert tool_choice("required", None, {"add"}, after) == "auto"
    assert tool_choice("required", "add", {"add"}, after) == "auto"
    # several rounds in, the same
    assert tool_choice("required", "add", {"add"}, [*after, calls(4, B), result(5, B)]) == "auto"
    # a forced tool this call does not offer forces nothing
    assert tool_choice("required", "add", {"search_docs"}, [user(1)]) == "auto"
    for word in ("auto", "none"):
        assert tool_choice(word, None, {"add"}, [user(1)]) == word
        assert tool_choice(word, None, {"add"}, after) == word


# --- a claim over its attempt budget ------------------------------------------------------------


@pytest.mark.row(1)
def test_a_claim_over_the_attempt_budget_fails_the_turn() -> None:
    assert on_claim(attempts=1, max_attempts=3) is None
    assert on_claim(attempts=3, max_attempts=3) is None
    assert on_claim(attempts=4, max_attempts=3) == Fail(GAVE_UP_ERROR.format(attempts=3))


# --- what a model's reply commits ---------------------------------------------------------------


@pytest.mark.row(14)
def test_a_text_reply_is_the_answer() -> None:
    assert judge_reply("Hi.", (), "stop", used_ids=(), seq=2) == RecordAnswer("Hi.")


@pytest.mark.row(12)
def test_tool_calls_are_recorded_with_ids_unique_in_the_conversation() -> None:
    repeated = ToolCall("call_a", "add", "{}")
    verdict = judge_reply(None, (repeated, B), "tool_calls", used_ids={"call_a"}, seq=5)
    assert verdict == RecordCalls((ToolCall("call_5_0", "add", "{}"), B))


@pytest.mark.row(12)
def test_calls_with_text_are_calls() -> None:
    verdict = judge_reply("Let me look.", (A,), "tool_calls", used_ids=(), seq=2)
    assert verdict == RecordCalls((A,))


@pytest.mark.row(13)
@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_an_empty_reply_fails_the_turn(content: str | None) -> None:
    assert judge_reply(content, (), "stop", used_ids=(), seq=2) == Fail(EMPTY_REPLY_ERROR)


@pytest.mark.row(11)
def test_a_content_filter_fails_the_turn_even_with_text_or_calls() -> None:
    assert judge_reply("partial", (A,), "content_filter", used_ids=(), seq=2) == Fail(
        CONTENT_FILTER_ERROR
    )


@pytest.mark.row(10)
def test_a_model_error_fails_the_turn_with_its_message() -> None:
    assert model_failed("LLM call failed (HTTP 400)") == Fail("LLM call failed (HTTP 400)")


@pytest.mark.row(8)
def test_a_used_up_budget_fails_the_turn_before_the_model_call() -> None:
    used_up = "The conversation's budget of 1000 tokens is used up"
    assert over_budget(used_up) == Fail(used_up)
    assert over_budget(None) is None  # the model call goes on


# --- waiting for the user -----------------------------------------------------------------------


@pytest.mark.row(3, 5, 17)
def test_calls_the_user_answers_wait_while_the_others_run_then_the_turn_pauses() -> None:
    from app.worker.steps import PendingAction, RequireAction

    tools = toolbox(
        {"add"}, {"add"}, action_kinds={"ask_user": "clarification", "locate": "client_tool"}
    )
    ask, loc = ToolCall("q", "ask_user", '{"question": "?"}'), ToolCall("l", "locate", "{}")
    add = ToolCall("a", "add", '{"a": 1}')
    transcript = [Entry(1, "user", "go"), Entry(2, "assistant", None, (ask, loc, add))]
    assert next_step(transcript, 1, CAP, tools=tools) == RunTool(add, {"a": 1})
    answered = [*transcript, Entry(3, "tool", "1", (), "a", "add")]
    assert next_step(answered, 1, CAP, tools=tools) == RequireAction(
        (
            PendingAction(ask, "clarification", {"question": "?"}),
            PendingAction(loc, "client_tool", {}),
        )
    )
    # A waiting call's answer is its result: with every call answered, the model goes on.
    done = [
        *answered,
        Entry(4, "tool", "yes", (), "q", "ask_user"),
        Entry(5, "tool", "Paris", (), "l", "locate"),
    ]
    assert next_step(done, 1, CAP, tools=tools) == CallModel()
    # A cancel answers the waiting calls "cancelled" (row 3 comes first).
    assert next_step(answered, 1, CAP, tools=tools, cancel_requested=True) == RejectCall(
        ask, CANCELLED_RESULT
    )


@pytest.mark.row(5)
def test_a_waiting_call_with_broken_arguments_is_answered_by_the_worker_not_the_user() -> None:
    tools = toolbox(set(), set(), action_kinds={"locate": "client_tool"})
    broken = ToolCall("l", "locate", "{oops")
    transcript = [Entry(1, "user", "go"), Entry(2, "assistant", None, (broken,))]
    action = next_step(transcript, 1, CAP, tools=tools)
    assert isinstance(action, RejectCall) and "not valid JSON" in action.error


@pytest.mark.row(5)
def test_a_call_needing_approval_waits_until_approved() -> None:
    from app.worker.steps import PendingAction, RequireAction

    note = ToolCall("n", "write_note", '{"text": "x"}')
    transcript = [Entry(1, "user", "go"), Entry(2, "assistant", None, (note,))]
    asks = toolbox({"write_note"}, {"write_note"}, approval={"write_note"})
    assert next_step(transcript, 1, CAP, tools=asks) == RequireAction(
        (PendingAction(note, "approval", {"text": "x"}),)
    )
    approved = toolbox({"write_note"}, {"write_note"}, approval={"write_note"}, approved={"n"})
    assert next_step(transcript, 1, CAP, tools=approved) == RunTool(note, {"text": "x"})


@pytest.mark.row(5, 18)
def test_a_call_of_the_worker_s_own_tools_is_answered_by_the_worker_not_run_on_a_server() -> None:
    tools = toolbox([A.name], [A.name], cache=["session_cache_get"])
    read = ToolCall("r", "session_cache_get", '{"id": "call_a"}')
    transcript = [user(1), calls(2, read, A)]
    assert next_step(transcript, 1, CAP, tools=tools) == RunOwnTool(read, {"id": "call_a"})
    transcript.append(result(3, read))
    assert next_step(transcript, 1, CAP, tools=tools) == runs(A)


@pytest.mark.row(5)
def test_a_call_in_flight_at_a_crash_runs_again_only_if_its_tool_says_it_may() -> None:
    from app.worker.plan import IN_FLIGHT_REASON, OUTCOME_UNKNOWN_RESULT
    from app.worker.steps import PendingAction, RequireAction

    note = ToolCall("n", "write_note", '{"text": "x"}')
    look = ToolCall("l", "search", '{"q": "x"}')
    transcript = [Entry(1, "user", "go"), Entry(2, "assistant", None, (note,))]
    names = {"write_note", "search"}

    def plan(**options: Any) -> Step:
        tools = toolbox(names, names, guarded={"write_note"}, **options)
        return next_step(transcript, 1, CAP, tools=tools)

    marked = RunTool(note, {"text": "x"}, mark_in_flight=True)
    assert plan() == marked  # not in flight: it runs (marked first)
    assert plan(in_flight="n") == RequireAction(
        (PendingAction(note, "approval", {"text": "x"}, IN_FLIGHT_REASON),)
    )
    assert plan(in_flight="n", in_flight_policy="error") == RejectCall(note, OUTCOME_UNKNOWN_RESULT)
    # An approval given before that run does not cover a second one: the user is asked again
    # (approving the question clears the in-flight mark: the web side's answer).
    assert plan(in_flight="n", approved={"n"}) == plan(in_flight="n")
    assert plan(approved={"n"}) == marked  # the user said so (the mark cleared)
    # A tool that may run again (read-only or idempotent: not guarded) simply runs again.
    searching = [Entry(1, "user", "go"), Entry(2, "assistant", None, (look,))]
    tools = toolbox(names, names, guarded={"write_note"}, in_flight="l")
    assert next_step(searching, 1, CAP, tools=tools) == RunTool(look, {"q": "x"})
