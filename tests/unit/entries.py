"""Transcript entries for the planner's and the transcript's unit tests."""

from __future__ import annotations

from app.worker.plan import Entry, ToolCall

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
