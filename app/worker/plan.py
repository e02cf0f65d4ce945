"""The pure planner: every decision about a turn's fate, from what is committed. No I/O here.

`on_claim` decides whether a claimed turn may go on at all; then `next_action` reads the turn's
committed messages and counters (the crash-point table: a fresh run and a resumed one ask the same
question of the same data, so they are the same path):

    committed state                                             next action
    ----------------------------------------------------------  ----------------------------------
 1  this claim is attempt `max_attempts` + 1 without a          Fail(GAVE_UP): the step keeps
    committed step in between, and no cancel was requested        killing its worker
    (`on_claim`)
 2  assistant text with no tool calls                           Finish: the turn is done, idle
                                                                  (an answer stays completed even
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
      was running when its worker stopped (`in_flight`), of a   Pause for approval ("may or may
        tool that is neither read-only nor idempotent, not        not have happened"), or by
        approved since                                            policy RejectCall(UNKNOWN)
      a tool only the user or their client answers              (waiting: the next call first)
        (`agent_clarify`, a client-executed tool), or a tool
        whose calls the user approves first, not yet approved
        (denied: the web side committed its result already)
      otherwise                                                 RunTool(call, arguments)
    every unanswered call is waiting                            Pause: the turn requires action,
                                                                  one pending action per call
 6  every call answered, and the last `max_error_rounds`        Fail(ERROR_ROUNDS)
    rounds of calls all came back as errors
 7  a user message, or every call answered, and `iterations`    Fail(MAX_ITERATIONS)
    has reached `max_iterations`
 8  a user message, or every call answered                      CallModel

`model_failed` and `judge_reply` decide what a model call's outcome commits:

    the model's reply                                           committed
    ----------------------------------------------------------  ----------------------------------
 9  the call failed for good (not transient, or retries spent)  Fail(the readable error)
10  blocked by the provider's content filter                    Fail(CONTENT_FILTER)
11  tool calls (ids made unique in the conversation)            RecordCalls: tool_loop
12  no tool calls and blank text                                Fail(EMPTY_REPLY)
13  text                                                        RecordAnswer: idle

A reply that arrived is committed by these rows even when a cancel came while it was on its way:
the cancel then acts on the next plan (row 3). A cancel that arrives during the model call aborts
the call, so no reply comes and row 3 cancels the turn.

A paused turn (`requires_action`) holds no lease and runs nothing; the user's answers are
committed as the waiting calls' results by the web side, which hands the turn back to the
workers, and the next claim plans from row 1 again like after any other step.

Every action commits one step (one transaction) and the next action is planned again from what is
then committed: a crash anywhere resumes at the row that matches the database. Crash points:
after submit or during the model call (8), after the tool calls are committed or between two
results (5, only unanswered calls run), after the last result (8), after the answer (nothing: idle).
A cancel requested before a crash is still requested after it: the next claim sees it (row 3).

Not decided here, because nothing is written: a lost lease (a fenced write matched nothing) stops
the run, and a worker shutting down releases the lease for another worker to continue.
What the model is sent is built by `transcript.Transcript`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

APPROVAL = "approval"  # app.models.APPROVAL: the planner imports nothing of the database

MAX_ITERATIONS_ERROR = "Max tool iterations reached"
EMPTY_REPLY_ERROR = "The model returned an empty message"
CONTENT_FILTER_ERROR = "The provider's content filter blocked the model's answer"
ERROR_ROUNDS_ERROR = (
    "The model's tool calls failed {rounds} rounds in a row; the last error: {last}"
)
GAVE_UP_ERROR = (
    "Gave up after {attempts} attempts: the worker stopped each time before this turn could "
    "commit its next step (a tool or model call may be crashing the worker)"
)
CUT_OFF_RESULT = (
    "Error: your reply was cut off by the output length limit before this tool call was "
    "complete, so it was not run. Make a shorter call."
)
MAX_ERROR_ROUNDS = 3
NO_USER_MESSAGE_ERROR = "Nothing to answer: the conversation has no user message"
CANCELLED_RESULT = "Cancelled by the user: this tool call did not complete."
IN_FLIGHT_REASON = "the worker stopped while this call was running; it may or may not have happened"
OUTCOME_UNKNOWN_RESULT = (
    "Error: the worker stopped while this call was running, so its outcome is unknown: it may "
    "or may not have happened. It was not run again; check before calling it again."
)
ASK, ERROR = "ask", "error"  # what becomes of such a call (`CHATWORKER_IN_FLIGHT_RECOVERY`)


class ToolCall(NamedTuple):
    """One call the model asked for; `arguments` is the model's raw text, possibly invalid JSON."""

    id: str
    name: str
    arguments: str

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(str(data["id"]), str(data["name"]), str(data.get("arguments") or ""))


class Entry(NamedTuple):
    """A committed message, as the planner sees it.

    Immutable; a NamedTuple rather than a frozen dataclass because a claim builds one per message of
    the history, and a frozen dataclass takes 6 times as long to construct (2.8 against 0.45 us).
    """

    seq: int
    role: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    finish_reason: str | None = None


class Toolbox(NamedTuple):
    """The tool names a turn may call (`offered`), every name the worker has (`known`, to word a
    refusal), the check of a call's arguments against its tool's schema (`check`: None when
    they pass, else the error result; `arguments.ArgumentCheck`), and the tools the worker never
    runs because the user or their client answers them (`waits`: name -> action kind)."""

    offered: frozenset[str] = frozenset()
    known: frozenset[str] = frozenset()
    check: Callable[[str, dict[str, Any]], str | None] | None = None
    waits: Mapping[str, str] = MappingProxyType({})
    approval: frozenset[str] = frozenset()  # tools whose every call the user approves first
    approved: frozenset[str] = frozenset()  # call ids the user approved
    guarded: frozenset[str] = frozenset()  # tools that may not simply run again
    in_flight: str | None = None  # the call a stopped worker was running (of a guarded tool)
    in_flight_policy: str = ASK  # ask (approval) or error (the model is told)


NO_TOOLS = Toolbox()


# --- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallModel:
    """Send the transcript to the model; `judge_reply` decides what its answer commits."""


@dataclass(frozen=True)
class RunTool:
    """Execute this call with these (checked) arguments and commit its result on its own."""

    call: ToolCall
    arguments: dict[str, Any]


@dataclass(frozen=True)
class RejectCall:
    """Commit `error` as this call's result without running it; the model reads why."""

    call: ToolCall
    error: str


class PendingAction(NamedTuple):
    """A call the turn waits on: its kind (`clarification`, `client_tool`, `approval`), checked
    arguments, and why it is asked when that is not obvious (`reason`)."""

    call: ToolCall
    kind: str
    arguments: dict[str, Any]
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        found = {
            "call_id": self.call.id,
            "kind": self.kind,
            "name": self.call.name,
            "arguments": self.arguments,
        }
        return found if self.reason is None else {**found, "reason": self.reason}


@dataclass(frozen=True)
class Pause:
    """Every unanswered call waits for the user or their client: the turn requires action
    (lease released, nothing running) until the web side commits their results."""

    actions: tuple[PendingAction, ...]


@dataclass(frozen=True)
class Finish:
    """The turn's final answer is committed: the conversation goes idle."""


@dataclass(frozen=True)
class Fail:
    """The turn cannot go on: the conversation fails with this error."""

    error: str


@dataclass(frozen=True)
class Cancel:
    """The user cancelled the turn and every call is answered: the turn ends `cancelled`."""


Action = CallModel | RunTool | RejectCall | Pause | Finish | Fail | Cancel


@dataclass(frozen=True)
class RecordCalls:
    """Commit the assistant's tool calls (and any text with them): the turn enters tool_loop."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class RecordAnswer:
    """Commit the final text: the turn is done."""

    content: str


Verdict = RecordCalls | RecordAnswer | Fail


# --- the decisions ------------------------------------------------------------------------------


def on_claim(attempts: int, max_attempts: int, cancel_requested: bool = False) -> Fail | None:
    """Row 1: a turn claimed `attempts` times since its last committed step (this claim
    included) fails once that is over `max_attempts`; None lets it go on.

    Decided before anything else runs: a step that kills its worker must not get another try.
    A turn the user cancelled goes on to be cancelled instead (row 3 runs nothing)."""
    if attempts > max_attempts and not cancel_requested:
        return Fail(GAVE_UP_ERROR.format(attempts=attempts - 1))
    return None


def next_action(
    transcript: Sequence[Entry],
    iterations: int,
    max_iterations: int,
    max_error_rounds: int = MAX_ERROR_ROUNDS,
    *,
    tools: Toolbox = NO_TOOLS,
    cancel_requested: bool = False,
) -> Action:
    """The next step of the turn (rows 2-8 of the table), from what is committed.

    `iterations` counts the turn's committed LLM calls; `tools` are the names it may call;
    `cancel_requested` says the user asked to stop the turn.
    """
    turn = current_turn(transcript)
    assistant = _last_assistant(turn)
    if assistant is not None and not assistant.tool_calls:
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
        return Pause(tuple(waiting))
    return _model_step(turn, iterations, max_iterations, max_error_rounds)


def _model_step(
    turn: Sequence[Entry], iterations: int, max_iterations: int, max_error_rounds: int
) -> Fail | CallModel:
    """Every call is answered (or the turn just began): the model, unless a cap is reached."""
    rounds, last_error = _error_rounds(turn)
    if rounds >= max_error_rounds:
        return Fail(ERROR_ROUNDS_ERROR.format(rounds=rounds, last=last_error))
    if iterations >= max_iterations:
        return Fail(MAX_ITERATIONS_ERROR)
    return CallModel()


def judge_reply(
    content: str | None,
    tool_calls: Iterable[ToolCall],
    finish_reason: str | None,
    *,
    used_ids: Iterable[str],
    seq: int,
) -> Verdict:
    """What a model's reply commits (rows 9-12); `seq` is the seq it will be committed under,
    `used_ids` the tool-call ids the conversation already has."""
    if finish_reason == "content_filter":
        return Fail(CONTENT_FILTER_ERROR)
    calls = unique_tool_calls(tool_calls, used_ids, seq)
    if calls:
        return RecordCalls(calls)
    if not (content or "").strip():
        return Fail(EMPTY_REPLY_ERROR)
    return RecordAnswer(content or "")


def model_failed(error: str) -> Fail:
    """A model call that failed for good ends the turn with its readable error (row 8)."""
    return Fail(error)


def _tool_step(
    call: ToolCall, tools: Toolbox, cut_off: bool
) -> RunTool | RejectCall | PendingAction:
    checked = check_call(call, tools.offered, tools.known, cut_off)
    if isinstance(checked, str):
        return RejectCall(call, checked)
    refused = tools.check(call.name, checked) if tools.check is not None else None
    if refused is not None:
        return RejectCall(call, refused)
    return _waiting(call, tools, checked) or RunTool(call, checked)


def _waiting(
    call: ToolCall, tools: Toolbox, checked: dict[str, Any]
) -> RejectCall | PendingAction | None:
    """Whether a call with good arguments waits for the user (or is refused after a crash)."""
    if call.id == tools.in_flight and call.name in tools.guarded and call.id not in tools.approved:
        if tools.in_flight_policy == ERROR:
            return RejectCall(call, OUTCOME_UNKNOWN_RESULT)
        return PendingAction(call, APPROVAL, checked, IN_FLIGHT_REASON)
    kind = tools.waits.get(call.name)
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
    for entry in reversed(turn):
        if entry.role == "assistant":
            return entry
    return None


# --- the tools a turn may call ------------------------------------------------------------------


def uses_tools(allowed: Collection[str], tool_choice: str) -> bool:
    """Whether the turn offers tools at all; if not, one model call answers (the simple path)."""
    return bool(allowed) and tool_choice != "none"


def toolbox(
    allowed: Collection[str],
    available: Iterable[str],
    check: Callable[[str, dict[str, Any]], str | None] | None = None,
    waits: Mapping[str, str] | None = None,
    *,
    own: Iterable[str] = (),
    approval: Iterable[str] = (),
    approved: Iterable[str] = (),
    guarded: Iterable[str] = (),
    in_flight: str | None = None,
    in_flight_policy: str = ASK,
) -> Toolbox:
    """Least privilege: only the allowed tools the worker has are offered, and only they run
    (with arguments `check` accepts); the tools the user or their client answers (`waits`) are
    offered too, and never run; so are the worker's `own` (the session cache's readers)."""
    waits = MappingProxyType(dict(waits or {}))
    own = frozenset(own) | frozenset(waits)
    known = frozenset(available) | own
    offered = (known & frozenset(allowed)) | own
    return Toolbox(
        offered=offered,
        known=known,
        check=check,
        waits=waits,
        approval=frozenset(approval),
        approved=frozenset(approved),
        guarded=frozenset(guarded),
        in_flight=in_flight,
        in_flight_policy=in_flight_policy,
    )


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


# --- normalizing what the model returned ------------------------------------------------------


def unique_tool_calls(
    calls: Iterable[ToolCall], used_ids: Iterable[str], seq: int
) -> tuple[ToolCall, ...]:
    """Give every call an id unique in the conversation, keeping the model's id where it is.

    Some providers send empty ids or reuse `call_0` every turn; the transcript keys results by id,
    so a repeated or missing id is replaced by one derived from the message's seq.
    """
    taken = set(used_ids)
    result = []
    for index, call in enumerate(calls):
        call_id = call.id.strip()
        if not call_id or call_id in taken:
            call_id = f"call_{seq}_{index}"
            while call_id in taken:
                call_id += "_"
        taken.add(call_id)
        result.append(ToolCall(call_id, call.name, call.arguments))
    return tuple(result)


# --- checking a call before it runs --------------------------------------------------------------


def check_call(
    call: ToolCall, offered: Collection[str], known: Collection[str], cut_off: bool = False
) -> dict[str, Any] | str:
    """The call's arguments as a JSON object, or the error result to feed back instead.

    A tool that is not offered to this conversation never runs, even when the model names it;
    nor does a call from a reply the length limit cut off (`cut_off`), whose arguments may be
    incomplete even when they parse.
    """
    if cut_off:
        return CUT_OFF_RESULT
    if call.name not in offered:
        if call.name in known:
            return f"Tool {call.name} is not allowed in this conversation."
        return f"Unknown tool: {call.name}. Use one of the tools you were given."
    text = call.arguments.strip() or "{}"  # some models send "" for a tool without parameters
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        return f"Invalid arguments for {call.name}: not valid JSON ({exc}). Send a JSON object."
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return f"Invalid arguments for {call.name}: expected a JSON object, got {kind}."
    return arguments
