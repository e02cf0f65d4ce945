"""What a model call's outcome commits (rows 10-14, 27 and 30 of `plan`'s table): the reply
judged (against the turn's schema, when it asks for one), its tool calls given ids unique in the
conversation, a failure moved to a fallback model. Pure, no I/O, like the planner: the answer's
check against the schema (`structured.judge`, bounded: `checker.py`) is done before, when
`judged_against` says it is needed, and handed in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.worker.entry import ToolCall
from app.worker.steps import Fail
from app.worker.structured import Judgement, Matched, Mismatch, Unjudged

EMPTY_REPLY_ERROR = "The model returned an empty message"
CONTENT_FILTER_ERROR = "The provider's content filter blocked the model's answer"


@dataclass(frozen=True)
class RecordCalls:
    """Commit the assistant's tool calls (and any text with them): the turn enters tool_loop."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class RecordAnswer:
    """Commit the final text: the turn is done (`output`: a structured answer's parsed value)."""

    content: str
    output: Any = None


@dataclass(frozen=True)
class RecordRefused:
    """Row 27: commit a structured answer that does not match its schema, and why."""

    content: str
    error: str


@dataclass(frozen=True)
class FallBack:
    """Row 30: the turn moves to `model` (committed), and the call is made again with it."""

    model: str


Verdict = RecordCalls | RecordAnswer | RecordRefused | Fail


def model_failed(
    error: str,
    *,
    may_fall_back: bool = False,
    using: str = "",
    models: Sequence[str] = (),
) -> Fail | FallBack:
    """Rows 10 and 30: a model call that failed for good ends the turn with its readable error,
    unless the failure may fall back (`may_fall_back`: the provider was down, or its transient
    errors spent their retries) and `models` (the conversation's model, then its fallbacks, in
    order) has one after `using`, the model the turn uses now."""
    if may_fall_back:
        following = next_model(models, using)
        if following is not None:
            return FallBack(following)
    return Fail(error)


def next_model(models: Sequence[str], using: str) -> str | None:
    """The model after `using` in `models` (the first when `using` is not in it); None at
    the end of the list."""
    if using not in models:
        return next((model for model in models if model != using), None)
    index = list(models).index(using)
    return models[index + 1] if index + 1 < len(models) else None


def judged_against(
    content: str | None,
    tool_calls: Sequence[ToolCall],
    finish_reason: str | None,
    schema: Mapping[str, Any] | None,
) -> Mapping[str, Any] | None:
    """The schema a reply's answer must be judged against before `judge_reply` (row 27): the
    turn's, when the reply is a text answer (not blocked, no tool calls, not blank)."""
    if schema is None or finish_reason == "content_filter" or tool_calls:
        return None
    return schema if (content or "").strip() else None


def judge_reply(
    content: str | None,
    tool_calls: Iterable[ToolCall],
    finish_reason: str | None,
    *,
    used_ids: Collection[str],
    seq: int,
    judged: Judgement | None = None,
) -> Verdict:
    """What a model's reply commits (rows 11-14, 27); `seq` is the seq it will be committed
    under, `used_ids` the tool-call ids the conversation already has, `judged` what its answer
    made of the turn's schema (None: the turn takes any text). An answer that could not be
    judged within the checker's bounds fails the turn, saying why."""
    if finish_reason == "content_filter":
        return Fail(CONTENT_FILTER_ERROR)
    calls = unique_tool_calls(tool_calls, used_ids, seq)
    if calls:
        return RecordCalls(calls)
    if not (content or "").strip():
        return Fail(EMPTY_REPLY_ERROR)
    return _answer(content or "", judged)


def _answer(content: str, judged: Judgement | None) -> Verdict:
    """Rows 14 and 27: the answer, judged against the turn's schema when it has one."""
    match judged:
        case Matched(output):
            return RecordAnswer(content, output)
        case Mismatch(error):
            return RecordRefused(content, error)
        case Unjudged(error):
            return Fail(error)
    return RecordAnswer(content)


def unique_tool_calls(
    calls: Iterable[ToolCall], used_ids: Collection[str], seq: int
) -> tuple[ToolCall, ...]:
    """Give every call an id unique in the conversation, keeping the model's id where it is.

    Some providers send empty ids or reuse `call_0` every turn; the transcript keys results by id,
    so a repeated or missing id is replaced by one derived from the message's seq. (`used_ids`
    is read, never copied: a long conversation has thousands.)
    """
    given: set[str] = set()
    result = []
    for index, call in enumerate(calls):
        call_id = call.id.strip()
        if not call_id or call_id in used_ids or call_id in given:
            call_id = f"call_{seq}_{index}"
            while call_id in used_ids or call_id in given:
                call_id += "_"
        given.add(call_id)
        result.append(ToolCall(call_id, call.name, call.arguments))
    return tuple(result)


__all__ = [
    "CONTENT_FILTER_ERROR",
    "EMPTY_REPLY_ERROR",
    "FallBack",
    "RecordAnswer",
    "RecordCalls",
    "RecordRefused",
    "Verdict",
    "judge_reply",
    "judged_against",
    "model_failed",
    "next_model",
    "unique_tool_calls",
]
