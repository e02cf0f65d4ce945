"""The pure planner: what to do next, decided from the committed transcript alone. No I/O here.

The rules (the crash-point table of DESIGN.md, read from the last committed messages of the turn):

    last committed state                                     next action
    ------------------------------------------------------   ---------------------------------------
    no user message at all                                   Fail("... no user message ...")
    user message, or every call of the last assistant        CallModel, unless `iterations` has
      message answered                                         reached the cap: Fail(MAX_ITERATIONS)
    assistant message with calls not all answered            RunTools(exactly the unanswered calls)
    assistant text with no tool calls                        Finish (the turn is done: idle)

A fresh run and a resumed run ask the same question of the same data, so they are the same path.
What the model is sent is built by `transcript.Transcript`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

MAX_ITERATIONS_ERROR = "Max tool iterations reached"
EMPTY_REPLY_ERROR = "The model returned an empty message"
CONTENT_FILTER_ERROR = "The provider's content filter blocked the model's answer"
ERROR_ROUNDS_ERROR = (
    "The model's tool calls failed {rounds} rounds in a row; the last error: {last}"
)
CUT_OFF_RESULT = (
    "Error: your reply was cut off by the output length limit before this tool call was "
    "complete, so it was not run. Make a shorter call."
)
MAX_ERROR_ROUNDS = 3
NO_USER_MESSAGE_ERROR = "Nothing to answer: the conversation has no user message"


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


# --- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallModel:
    """Send the transcript to the model."""


@dataclass(frozen=True)
class RunTools:
    """Execute exactly these calls, in order, committing each result on its own."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Finish:
    """The turn's final answer is committed: the conversation goes idle."""


@dataclass(frozen=True)
class Fail:
    """The turn cannot go on: the conversation fails with this error."""

    error: str


Action = CallModel | RunTools | Finish | Fail


def next_action(
    transcript: Sequence[Entry],
    iterations: int,
    max_iterations: int,
    max_error_rounds: int = MAX_ERROR_ROUNDS,
) -> Action:
    """The next step of the turn, from what is committed and the turn's LLM call count.

    Failed tool calls go back to the model so it can fix them, but only `max_error_rounds`
    rounds in a row whose every result is an error: then the turn fails instead of looping.
    """
    turn = current_turn(transcript)
    if not turn:
        return Fail(NO_USER_MESSAGE_ERROR)
    assistant = _last_assistant(turn)
    if assistant is not None and not assistant.tool_calls:
        return Finish()
    pending = pending_calls(turn)
    if pending:
        return RunTools(pending)
    rounds, last_error = _error_rounds(turn)
    if rounds >= max_error_rounds:
        return Fail(ERROR_ROUNDS_ERROR.format(rounds=rounds, last=last_error))
    if iterations >= max_iterations:
        return Fail(MAX_ITERATIONS_ERROR)
    return CallModel()


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


__all__ = [
    "CONTENT_FILTER_ERROR",
    "CUT_OFF_RESULT",
    "EMPTY_REPLY_ERROR",
    "ERROR_ROUNDS_ERROR",
    "MAX_ERROR_ROUNDS",
    "MAX_ITERATIONS_ERROR",
    "NO_USER_MESSAGE_ERROR",
    "Action",
    "CallModel",
    "Entry",
    "Fail",
    "Finish",
    "RunTools",
    "ToolCall",
    "check_call",
    "current_turn",
    "next_action",
    "pending_calls",
    "recovery_delay",
    "unique_tool_calls",
]
