"""What a model call's outcome commits (rows 10-14 of `plan`'s table): the reply judged, its tool
calls given ids unique in the conversation. Pure, no I/O, like the planner.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from app.worker.plan import Fail, ToolCall

EMPTY_REPLY_ERROR = "The model returned an empty message"
CONTENT_FILTER_ERROR = "The provider's content filter blocked the model's answer"


@dataclass(frozen=True)
class RecordCalls:
    """Commit the assistant's tool calls (and any text with them): the turn enters tool_loop."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class RecordAnswer:
    """Commit the final text: the turn is done."""

    content: str


Verdict = RecordCalls | RecordAnswer | Fail


def model_failed(error: str) -> Fail:
    """Row 10: a model call that failed for good ends the turn with its readable error."""
    return Fail(error)


def judge_reply(
    content: str | None,
    tool_calls: Iterable[ToolCall],
    finish_reason: str | None,
    *,
    used_ids: Collection[str],
    seq: int,
) -> Verdict:
    """What a model's reply commits (rows 11-14); `seq` is the seq it will be committed under,
    `used_ids` the tool-call ids the conversation already has."""
    if finish_reason == "content_filter":
        return Fail(CONTENT_FILTER_ERROR)
    calls = unique_tool_calls(tool_calls, used_ids, seq)
    if calls:
        return RecordCalls(calls)
    if not (content or "").strip():
        return Fail(EMPTY_REPLY_ERROR)
    return RecordAnswer(content or "")


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
    "RecordAnswer",
    "RecordCalls",
    "Verdict",
    "judge_reply",
    "model_failed",
    "unique_tool_calls",
]
