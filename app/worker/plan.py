"""The pure planner: every decision about a turn's fate, from what is committed. No I/O here.

`on_claim` decides whether a claimed turn may go on at all; then `next_step` reads the turn's
committed messages and counters (the crash-point table: a fresh run and a resumed one ask the same
question of the same data, so they are the same path):

    committed state                                             next step
    ----------------------------------------------------------  ----------------------------------
 1  this claim is attempt `max_attempts` + 1 without a          Fail(GAVE_UP): the step keeps
    committed step in between, and no cancel was requested        killing its worker
    (`on_claim`)
 2  assistant text with no tool calls (and not refused, row      Finish: the turn is done, idle
    27)                                                           (an answer stays completed even
                                                                  when a cancel follows it)
 3  a cancel was requested (the claim, a committed step, the
    heartbeat or the live notice saw it):
      a call of the last assistant message is unanswered        RejectCall(CANCELLED), in call order
      otherwise                                                 Cancel: the turn is cancelled
 4  no user message                                             Fail(NO_USER_MESSAGE)
 5  assistant tool calls not all answered; the first
    unanswered call (in call order) that is not waiting:
      its reply was cut off by the length limit                 RejectCall(CUT_OFF)
      names a tool not offered to this conversation             RejectCall(not allowed / unknown)
      has arguments that are not a JSON object                  RejectCall(invalid arguments)
      has arguments its tool's inputSchema refuses              RejectCall(naming the field)
      was running when its worker stopped (`in_flight`), of a   RequireAction: approval ("may
        tool that is neither read-only nor idempotent (even       or may not have happened"), or
        one approved before that run: an approval covers one      by policy RejectCall(UNKNOWN)
        run; approving this question clears the mark)
      a tool only the user or their client answers              (waiting: the next call first)
        (`agent_clarify`, a client-executed tool), or a tool
        whose calls the user approves first, not yet approved
        (denied: the web side committed its result already)
      one of the worker's own tools (the session cache's)       RunOwnTool: answered from the
                                                                  store, read-only
      a tool that may not simply run again (neither             RunTool(mark_in_flight): the
        read-only nor idempotent)                                 call is committed `in_flight`
                                                                  before it runs
      otherwise                                                 RunTool(call, arguments)
    every unanswered call is waiting                            RequireAction: the turn requires
                                                                  action, one pending action per
                                                                  call
 6  every call answered, and the last `max_error_rounds`        Fail(ERROR_ROUNDS)
    rounds of calls all came back as errors
 7  a user message, or every call answered, and `iterations`    Fail(MAX_ITERATIONS)
    has reached `max_iterations`
 8  row 9 is next, and a budget of the conversation or its      Fail(the budget's error)
    owner is used up by the committed totals (`over_budget`;
    asked only of a budgeted turn)
 9  a user message, or every call answered                      CallModel

`model_failed` and `judge_reply` (`verdict.py`) decide what a model call's outcome commits:

    the model's reply                                           committed
    ----------------------------------------------------------  ----------------------------------
10  the call failed for good (not transient, or retries spent)  Fail(the readable error)
11  blocked by the provider's content filter                    Fail(CONTENT_FILTER)
12  tool calls (ids made unique in the conversation)            RecordCalls: tool_loop
13  no tool calls and blank text                                Fail(EMPTY_REPLY)
14  text                                                        RecordAnswer: idle

`uses_tools` and `toolbox` (`offer.py`) decide, at the claim, what the turn offers the model:

    the turn and the worker                                     offered
    ----------------------------------------------------------  ----------------------------------
15  no tool allowed and no client tool, or tool_choice `none`   no tools: one model call answers
16  a server's tool the turn allows, not named like one of the  offered; runs on its server
    worker's own tools
17  `agent_clarify` (when on), the conversation's client tools  offered; never run (waiting, row 5)
18  the session cache's readers, while the cache is on, a       offered; answered from the store
    server's tool is offered, and what is sent refers to the      (RunOwnTool, row 5)
    cache (an output cut at the context cap, or elided; a
    summary): before that they could serve nothing

`context.decide` (`context.py`) decides, before each model call (row 9), whether what the model
is sent must be compacted first; each compaction is a committed step (`compactions`, the event
`context.compacted`), and a resumed turn sends by the latest one:

    the next request                                            decided
    ----------------------------------------------------------  ----------------------------------
19  compaction off, or the model's window unknown               send it as it is
20  under the trigger (threshold x window, less the reply's     send it
    room), and no overflow
21  earlier turns' tool outputs not yet elided                  Elide: sent as references
22  a range of the oldest messages can be summarised            Summarize: a model call, then a
                                                                  committed step
23  nothing left, and surely past the window                    Fail(TOO_LARGE)
24  nothing left otherwise                                      send it: the provider decides
25  the provider's overflow, with compaction off or after one   Fail(the overflow, and why)
    compaction for an overflow already (else rows 21-24 act
    on it whatever the estimate, and the call is tried again)

A message sent with `on_busy='steer'` waits as a turn of kind `steer` right behind the running
one (the web side admits it, `client/admission.py` rows 11-13):

    the turn and what waits behind it                           next step
    ----------------------------------------------------------  ----------------------------------
26  row 9 is next (every call answered, no cancel, no cap       TakeSteer: the message goes on
    reached), and the turn right behind is a steer message        the path in one committed step;
    still waiting                                                 the running turn ends
                                                                  `completed`, the steer turn
                                                                  carries the run on (the same
                                                                  lease and iteration count), and
                                                                  the model is called with it. A
                                                                  turn that ends first (an
                                                                  answer, a failure, a cancel, a
                                                                  pause) leaves it to run next

A turn that asks for a JSON Schema answer (`structured.py`: the message's schema, else the
conversation's) has its final answer judged against it before it completes:

    the turn's last answer                                      next step
    ----------------------------------------------------------  ----------------------------------
27  text that is not JSON, or does not match the schema         RecordRefused (`verdict`): kept,
                                                                  `is_error` and its violation
                                                                  (`output_error`); the turn goes
                                                                  on (`processing`)
28  a refused answer, with fewer than 1 + `REPAIRS` refused in  CallModel (rows 6-9 still apply):
    the turn (and no cancel: row 3)                               the model reads its answer and
                                                                  the violation, and answers again
29  a refused answer, the turn's repairs spent (among the       Fail(what was wrong)
    answers of its `iterations`: a retry starts them over)

A model call that failed for good (row 10) may move the turn to another model instead: the
conversation's `fallback_models` (else `CHATWORKER_FALLBACK_MODELS`), in order after the one it
uses now (`verdict.fall_back`):

    the failure                                                 committed
    ----------------------------------------------------------  ----------------------------------
30  the provider was down (a connection error, a 5xx, a         FallBack(the next model): the
    timeout) or its transient errors spent their retries, and     turn's `model` and
    a model is left after the one the turn uses                   `model.fallback`, one step; the
                                                                  call is made again with it, and
                                                                  a resumed turn goes on with it
    otherwise                                                   row 10: Fail

`tool_choice` (`offer.py`) decides, before each model call, what the model must call:

    the turn's tool choice and transcript                       sent
    ----------------------------------------------------------  ----------------------------------
31  `required` (or a forced tool it offers), no tool result     `required` (or that tool, named)
    after the turn's user message yet: its first model call
32  `required` with a tool result after it, or a forced tool    `auto`: forced again, a server's
    not offered; `auto` and `none` as they are                    tool would loop to the limit

A reply that arrived is committed by these rows even when a cancel came while it was on its way:
the cancel then acts on the next plan (row 3). A cancel that arrives during the model call aborts
the call, so no reply comes and row 3 cancels the turn.

A paused turn (`requires_action`) holds no lease and runs nothing; the user's answers are
committed as the waiting calls' results by the web side, which hands the turn back to the
workers, and the next claim plans from row 1 again like after any other step.

Every step commits (one transaction) and the next step is planned again from what is
then committed: a crash anywhere resumes at the row that matches the database. Crash points:
after submit or during the model call (9), after the tool calls are committed or between two
results (5, only unanswered calls run), after the last result (9), after the answer (nothing: idle).
A cancel requested before a crash is still requested after it: the next claim sees it (row 3).

Decided in SQL, because they must hold under concurrent writers (each in one statement, under
the conversation's row lock): the hand-over to the next queued turn when one ends (`NEXT_TURN`
in `store/fence.py`, part of the answer, finish, fail and cancel statements), the owner-limit
deferral of a claim (`CLAIM_LIMITED` and `DEFERRED` in `store/fence.py`, after the owner's
advisory lock), the recovery sweep's orphans (`Upkeep.orphans`, `store/upkeep.py`, when to ring
again: `recovery_delay` here) and the janitor's stale turns (`Upkeep.stale` and `fail_stale`,
`store/upkeep.py`, run by `janitor.py`).

Not decided here, because nothing is written: a lost lease (a fenced write matched nothing) stops
the run, and a worker shutting down releases the lease for another worker to continue.
What the model is sent is built by `transcript.Transcript`. The steps of the right-hand
columns are the types of `steps.py` (`CallModel`, `RunTool`, `Fail`...), and the verdicts of
`verdict.py` (`RecordCalls`, `RecordAnswer`...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.worker.entry import Entry, ToolCall
from app.worker.offer import ERROR, NO_TOOLS, Toolbox, check_call
from app.worker.steps import (
    CallModel,
    Cancel,
    Fail,
    Finish,
    PendingAction,
    RejectCall,
    RequireAction,
    RunOwnTool,
    RunTool,
    Step,
    TakeSteer,
)
from app.worker.structured import REPAIRS, refusal_error

APPROVAL = "approval"  # app.models.APPROVAL: the planner imports nothing of the database

MAX_ITERATIONS_ERROR = "Max tool iterations reached"
ERROR_ROUNDS_ERROR = (
    "The model's tool calls failed {rounds} rounds in a row; the last error: {last}"
)
GAVE_UP_ERROR = (
    "Gave up after {attempts} attempts: the worker stopped each time before this turn could "
    "commit its next step (a tool or model call may be crashing the worker)"
)
MAX_ERROR_ROUNDS = 3
NO_USER_MESSAGE_ERROR = "Nothing to answer: the conversation has no user message"
CANCELLED_RESULT = "Cancelled by the user: this tool call did not complete."
IN_FLIGHT_REASON = "the worker stopped while this call was running; it may or may not have happened"
OUTCOME_UNKNOWN_RESULT = (
    "Error: the worker stopped while this call was running, so its outcome is unknown: it may "
    "or may not have happened. It was not run again; check before calling it again."
)


# --- the decisions ------------------------------------------------------------------------------


def on_claim(attempts: int, max_attempts: int, cancel_requested: bool = False) -> Fail | None:
    """Row 1: a turn claimed `attempts` times since its last committed step (this claim
    included) fails once that is over `max_attempts`; None lets it go on.

    Decided before anything else runs: a step that kills its worker must not get another try.
    A turn the user cancelled goes on to be cancelled instead (row 3 runs nothing)."""
    if attempts > max_attempts and not cancel_requested:
        return Fail(GAVE_UP_ERROR.format(attempts=attempts - 1))
    return None


def next_step(
    transcript: Sequence[Entry],
    iterations: int,
    max_iterations: int,
    max_error_rounds: int = MAX_ERROR_ROUNDS,
    *,
    tools: Toolbox = NO_TOOLS,
    cancel_requested: bool = False,
    steer_waiting: bool = False,
) -> Step:
    """The next step of the turn (rows 2-7, 9 and 26 of the table), from what is committed.

    `iterations` counts the turn's committed LLM calls; `tools` are the names it may call;
    `cancel_requested` says the user asked to stop the turn; `steer_waiting` that a steer
    message waits right behind it.
    """
    turn = current_turn(transcript)
    assistant = _last_assistant(turn)
    if assistant is not None and not assistant.tool_calls and assistant.refusal is None:
        return Finish()
    pending = pending_calls(turn)
    if cancel_requested:
        return RejectCall(pending[0], CANCELLED_RESULT) if pending else Cancel()
    if not turn:
        return Fail(NO_USER_MESSAGE_ERROR)
    if pending:
        cut_off = assistant is not None and assistant.finish_reason == "length"
        waiting = []
        for call in pending:
            step = _tool_step(call, tools, cut_off)
            if not isinstance(step, PendingAction):
                return step
            waiting.append(step)
        return RequireAction(tuple(waiting))
    then = _model_step(turn, iterations, max_iterations, max_error_rounds)
    return TakeSteer() if steer_waiting and isinstance(then, CallModel) else then


def _model_step(
    turn: Sequence[Entry], iterations: int, max_iterations: int, max_error_rounds: int
) -> Fail | CallModel:
    """Every call is answered (or the turn just began, or its answer was refused): the model,
    unless a cap is reached or the answer's repairs are spent (rows 28, 29)."""
    # (this run's answers: a retry of a turn that failed so starts its repairs over)
    answers = [entry for entry in turn if entry.role == "assistant"][-iterations:]
    refused = [entry.refusal for entry in answers if iterations and entry.refusal is not None]
    if len(refused) > REPAIRS:
        return Fail(refusal_error(refused[-1] or ""))
    rounds, last_error = _error_rounds(turn)
    if rounds >= max_error_rounds:
        return Fail(ERROR_ROUNDS_ERROR.format(rounds=rounds, last=last_error))
    if iterations >= max_iterations:
        return Fail(MAX_ITERATIONS_ERROR)
    return CallModel()


def over_budget(used_up: str | None) -> Fail | None:
    """Row 8: a budgeted turn about to call the model fails when the store found a budget used
    up (`used_up` is its error); None lets the model call go on."""
    return None if used_up is None else Fail(used_up)


def _tool_step(
    call: ToolCall, tools: Toolbox, cut_off: bool
) -> RunTool | RunOwnTool | RejectCall | PendingAction:
    checked = check_call(call, tools.offered, tools.known, cut_off)
    if isinstance(checked, str):
        return RejectCall(call, checked)
    refused = tools.check(call.name, checked) if tools.check is not None else None
    if refused is not None:
        return RejectCall(call, refused)
    waiting = _waiting(call, tools, checked)
    if waiting is not None:
        return waiting
    if call.name in tools.own:
        return RunOwnTool(call, checked)
    return RunTool(call, checked, mark_in_flight=call.name in tools.guarded)


def _waiting(
    call: ToolCall, tools: Toolbox, checked: dict[str, Any]
) -> RejectCall | PendingAction | None:
    """Whether a call with good arguments waits for the user (or is refused after a crash)."""
    if call.id == tools.in_flight and call.name in tools.guarded:
        if tools.in_flight_policy == ERROR:
            return RejectCall(call, OUTCOME_UNKNOWN_RESULT)
        return PendingAction(call, APPROVAL, checked, IN_FLIGHT_REASON)
    kind = tools.action_kinds.get(call.name)
    if kind is not None:
        return PendingAction(call, kind, checked)
    if call.name in tools.approval and call.id not in tools.approved:
        return PendingAction(call, APPROVAL, checked)
    return None


def _error_rounds(turn: Sequence[Entry]) -> tuple[int, str]:
    """How many tool rounds at the end of the turn failed entirely, and the last error."""
    rounds, last_error, results = 0, "", []
    for entry in reversed(turn):
        if entry.role == "tool":
            results.append(entry)
        elif entry.role == "assistant" and entry.tool_calls:
            if not results or not all(r.is_error for r in results):
                break
            rounds += 1
            last_error = last_error or (results[0].content or "")
            results = []
        else:
            break
    return rounds, last_error[:300]


def current_turn(transcript: Sequence[Entry]) -> Sequence[Entry]:
    """The messages from the last user message on (empty when there is none)."""
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].role == "user":
            return transcript[index:]
    return ()


def pending_calls(turn: Sequence[Entry]) -> tuple[ToolCall, ...]:
    """The calls of the turn's last assistant message that have no committed result."""
    assistant = _last_assistant(turn)
    if assistant is None:
        return ()
    answered = {e.tool_call_id for e in turn if e.role == "tool" and e.seq > assistant.seq}
    return tuple(call for call in assistant.tool_calls if call.id not in answered)


def _last_assistant(turn: Sequence[Entry]) -> Entry | None:
    for index in range(len(turn) - 1, -1, -1):
        if turn[index].role == "assistant":
            return turn[index]
    return None


# --- recovering a turn whose worker died ---------------------------------------------------------


def recovery_delay(attempts: int, draw: float, base: float = 1.0, cap: float = 8.0) -> float:
    """Seconds to hold back the doorbell of a turn already claimed `attempts` times without
    committing a step (0 for a turn never claimed: its doorbell was merely lost).

    A crashed worker takes down every turn it held, and recovery finds them all at once; sent
    together, a turn that crashes workers would share the next worker with the same innocent turns
    at the same instant, again and again, and use up their attempts too. Spread out (and unclaimed
    while they wait, which costs no attempt), the innocent ones commit their step in between.
    `draw` is uniform in [0, 1); the window doubles with each attempt, up to `cap`.
    """
    if attempts < 1:
        return 0.0
    return float(draw * min(cap, base * 2 ** (attempts - 1)))


__all__ = [
    "Entry",
    "ToolCall",
    "current_turn",
    "next_step",
    "on_claim",
    "over_budget",
    "pending_calls",
    "recovery_delay",
]
