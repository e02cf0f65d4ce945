"""A turn's timeline cut from its committed events (app/client/timeline.py): pure."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from app.client.timeline import as_json, timeline
from app.client.views import EventView, MessageView, TurnView

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
CONVERSATION = uuid.uuid4()
TURN = TurnView(
    uuid.uuid4(), CONVERSATION, 1, "completed", "message", 1, None, None, 30, 9, T0, T0, T0, None
)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def event(seq: int, kind: str, ms: int, **fields: Any) -> EventView:
    return EventView(seq, kind, CONVERSATION, TURN.id, at(ms), **fields)


def message(seq: int, role: str, **fields: Any) -> MessageView:
    base: dict[str, Any] = {
        "content": "",
        "tool_calls": [],
        "tool_call_id": None,
        "tool_name": None,
        "is_error": False,
        "created_at": T0,
    }
    return MessageView(seq, role, **(base | fields))  # type: ignore[arg-type]


def committed(seq: int, ms: int, note: MessageView) -> EventView:
    return event(seq, "message.committed", ms, message_seq=note.seq, message=note)


def test_a_tool_turn_that_crashed_once_is_cut_into_its_steps() -> None:
    calls = [{"id": "c1", "name": "add", "arguments": "{}"}]
    events = [
        event(1, "turn.queued", 0),
        committed(2, 0, message(1, "user", content="2 + 3?")),
        event(3, "turn.started", 40, attempt=1),
        committed(4, 1040, message(2, "assistant", tool_calls=calls, usage={"prompt": 10})),
        event(5, "turn.resumed", 4040, attempt=2),  # (the worker died in the tool)
        committed(6, 4540, message(3, "tool", tool_name="add", content="5")),
        committed(7, 5540, message(4, "assistant", content="It is 5.")),
        event(8, "turn.completed", 5540),
    ]
    steps = timeline(TURN, events)
    assert [(s.kind, s.duration_ms) for s in steps] == [
        ("queued", 40),
        ("claimed", 0),
        ("model_call", 1000),
        ("resumed", 0),
        ("tool_call", 500),
        ("model_call", 1000),
        ("ended", 0),
    ]
    assert steps[2].detail == {"seq": 2, "usage": {"prompt": 10}, "tool_calls": ["add"], "chars": 0}
    assert steps[3].detail == {"attempt": 2}
    assert steps[4].detail == {"seq": 3, "tool": "add", "error": False}
    assert as_json(steps)[0]["duration_ms"] == 40


def test_a_pause_lasts_until_its_answer_and_a_cancel_while_it_waits_ends_it() -> None:
    calls = [{"id": "c1", "name": "locate", "arguments": "{}"}]
    answered = [
        event(1, "turn.started", 0, attempt=1),
        committed(2, 100, message(2, "assistant", tool_calls=calls)),
        event(3, "action.required", 100),
        committed(4, 60_100, message(3, "tool", tool_name="locate")),
        event(5, "turn.resumed", 60_150, attempt=1),
    ]
    kinds = [(s.kind, s.duration_ms) for s in timeline(TURN, answered)]
    assert kinds == [("claimed", 0), ("model_call", 100), ("paused", 60_000), ("resumed", 0)]
    cancelled = [*answered[:3], event(4, "context.compacted", 150, data={"kind": "elide"})]
    cancelled.append(event(5, "turn.cancelled", 9_100))
    steps = timeline(TURN, cancelled)
    assert [(s.kind, s.duration_ms) for s in steps][-3:] == [
        ("compacted", 0),
        ("paused", 9_000),
        ("ended", 0),
    ]
    assert steps[-3].detail == {"kind": "elide"}


def test_a_failure_s_class_is_its_http_status_and_type_or_its_first_words() -> None:
    from app.client.fleet import error_class

    assert error_class("LLM call failed (HTTP 429 RateLimitError): slow down") == (
        "HTTP 429 RateLimitError"
    )
    assert error_class("the turn gave up after 3 attempts: its worker died") == (
        "the turn gave up after 3 attempts"
    )
    assert error_class(None) == "unknown" and len(error_class("x" * 500)) == 60
