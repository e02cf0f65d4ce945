"""The Responses stream renderer (`app/api/responses/stream.py`), walked without services: a live
stream and a replay of the same committed log give the same events with the same numbers; a
retried or crashed attempt is closed as incomplete and numbered below the committed one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from app.api.responses.ids import ResponseId
from app.api.responses.stream import ATTEMPT_STRIDE, ResponseEvents
from app.api.responses.translate import Tools
from app.client.views import EventView, MessageView, TurnView
from app.live import ANY_STREAM, TEXT, Delta, Discarded, Fragment

NOW = datetime(2026, 11, 26, tzinfo=UTC)
TURN = uuid.uuid4()
CONVERSATION = uuid.uuid4()
TOOLS = Tools(frozenset({"get_location", "agent_clarify"}), {"add": "tools"})


def turn(status: str = "completed") -> TurnView:
    return TurnView(
        id=TURN, conversation_id=CONVERSATION, number=1, status=status,  # type: ignore[arg-type]
        kind="message", message_seq=1, idempotency_key=None, error=None, prompt_tokens=1,
        completion_tokens=1, created_at=NOW, started_at=NOW, finished_at=NOW,
        cancel_requested_at=None,
    )  # fmt: skip


def message(seq: int, role: str, content: str | None, **fields: Any) -> MessageView:
    return MessageView(
        seq=seq, role=role, content=content, tool_calls=fields.pop("tool_calls", []),  # type: ignore[arg-type]
        tool_call_id=fields.pop("tool_call_id", None), tool_name=fields.pop("tool_name", None),
        is_error=False, created_at=NOW, **fields,
    )  # fmt: skip


class Log:
    """A turn's committed events, numbered as the conversation's log numbers them."""

    def __init__(self) -> None:
        self.seq = 0

    def event(self, kind: str, msg: MessageView | None = None) -> EventView:
        self.seq += 1
        return EventView(
            seq=self.seq, type=kind, conversation_id=CONVERSATION, turn_id=TURN, created_at=NOW,
            message_seq=None if msg is None else msg.seq, message=msg,
        )  # fmt: skip


def delta(seq: int, stream: str, index: int, text: str, attempt: int = 0) -> Delta:
    return Delta(seq, stream, index, (Fragment(TEXT, 0, 0, text),), attempt)


def render(items: list[Any], segment: int = 0, status: str = "completed") -> list[dict[str, Any]]:
    events = ResponseEvents(ResponseId(TURN, segment), lambda s: {"status": s})
    out = events.begin(turn(status), TOOLS)
    for item in items:
        out += events.feed(item)
    if events.ended:
        out += events.finish({"status": "final"})
    return out


def numbers(events: list[dict[str, Any]]) -> list[int]:
    return [event["sequence_number"] for event in events]


def committed_only(items: list[Any]) -> list[Any]:
    return [item for item in items if isinstance(item, EventView)]


def start(log: Log) -> list[Any]:
    user = message(1, "user", "hello")
    return [log.event("turn.queued"), log.event("message.committed", user),
            log.event("turn.started")]  # fmt: skip


def test_a_reply_streamed_live_is_numbered_as_every_replay_numbers_it() -> None:
    log = Log()
    answer = message(2, "assistant", "Hello world", reply_stream={"attempt": 0, "text": [3, 3, 5]})
    live = [
        *start(log),
        delta(2, "s1", 0, "Hel"),
        delta(2, "s1", 1, "lo "),
        delta(2, "s1", 2, "world"),
        log.event("message.committed", answer),
        log.event("turn.completed"),
    ]
    streamed, replayed = render(live), render(committed_only(live))
    assert streamed == replayed
    assert numbers(streamed) == list(range(len(streamed)))  # no retry: no gap
    types = [event["type"] for event in streamed]
    assert types == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 3,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [e["delta"] for e in streamed if e["type"] == "response.output_text.delta"] == [
        "Hel", "lo ", "world",
    ]  # fmt: skip


def test_a_reader_that_joined_mid_reply_gets_the_rest_under_the_same_numbers() -> None:
    log = Log()
    answer = message(2, "assistant", "Hello world", reply_stream={"attempt": 0, "text": [3, 3, 5]})
    items = [*start(log), delta(2, "s1", 0, "Hel"), delta(2, "s1", 1, "lo "),
             log.event("message.committed", answer), log.event("turn.completed")]  # fmt: skip
    whole = render(items)
    assert [e["delta"] for e in whole if e["type"] == "response.output_text.delta"] == [
        "Hel", "lo ", "world",
    ]  # fmt: skip
    assert whole == render(committed_only(items))


def test_a_retried_call_is_closed_as_incomplete_and_the_committed_one_numbered_above_it() -> None:
    log = Log()
    answer = message(2, "assistant", "Hi there", reply_stream={"attempt": 1, "text": [3, 5]})
    live = [
        *start(log),
        delta(2, "s1", 0, "Hel"),
        Discarded(2, "s1", "retrying in 3 s"),
        delta(2, "s2", 0, "Hi ", attempt=1),
        delta(2, "s2", 1, "there", attempt=1),
        log.event("message.committed", answer),
        log.event("turn.completed"),
    ]
    streamed, replayed = render(live), render(committed_only(live))
    assert numbers(streamed) == sorted(numbers(streamed))
    dropped = next(e for e in streamed if e["type"] == "response.output_item.done")
    assert dropped["item"]["status"] == "incomplete"
    assert dropped["item"]["content"][0]["text"] == "Hel"
    # what a replay shows is exactly the live events it numbers alike
    by_number = {e["sequence_number"]: e for e in streamed}
    assert all(by_number[e["sequence_number"]] == e for e in replayed)
    live_only = sorted(set(by_number) - set(numbers(replayed)))
    committed_added = next(e for e in replayed if e["type"] == "response.output_item.added")
    assert live_only and max(live_only) < committed_added["sequence_number"]
    assert committed_added["sequence_number"] >= ATTEMPT_STRIDE  # attempt 1's block
    # a reader who stopped inside the dropped attempt resumes with the committed reply whole
    inside = live_only[-1]
    rest = [e for e in replayed if e["sequence_number"] > inside]
    assert rest[0]["type"] == "response.output_item.added"


def test_a_crashed_worker_s_partial_reply_sits_below_its_heir_s() -> None:
    log = Log()
    answer = message(2, "assistant", "Hi there", reply_stream={"attempt": 0, "text": [8]})
    live = [
        *start(log),
        delta(2, "s1", 0, "Hel"),
        Discarded(2, ANY_STREAM, "the turn resumed after its worker stopped"),
        log.event("turn.resumed"),
        delta(2, "s2", 0, "Hi there"),
        log.event("message.committed", answer),
        log.event("turn.completed"),
    ]
    streamed, replayed = render(live), render(committed_only(live))
    by_number = {e["sequence_number"]: e for e in streamed}
    assert all(by_number[e["sequence_number"]] == e for e in replayed)
    heir = next(e for e in replayed if e["type"] == "response.output_item.added")
    assert heir["sequence_number"] > max(set(by_number) - set(numbers(replayed)))
    text = "".join(e["delta"] for e in streamed if e["type"] == "response.output_text.delta")
    assert text == "HelHi there"  # the live stream showed the dead attempt, then closed it
    assert [e["item"]["status"] for e in streamed if e["type"] == "response.output_item.done"] == [
        "incomplete", "completed",
    ]  # fmt: skip


def test_a_cancelled_response_ends_with_response_incomplete() -> None:
    log = Log()
    events = render([*start(log), log.event("turn.cancelled")], status="cancelled")
    assert events[-1]["type"] == "response.incomplete"


def test_a_failed_response_ends_with_response_failed() -> None:
    log = Log()
    events = render([*start(log), log.event("turn.failed")], status="failed")
    assert events[-1]["type"] == "response.failed"


def test_a_pause_ends_the_response_and_the_answer_s_response_numbers_from_zero() -> None:
    log = Log()
    call = {"id": "c_loc", "name": "get_location", "arguments": "{}"}
    items = [
        *start(log),
        log.event("message.committed", message(2, "assistant", None, tool_calls=[call])),
        log.event("action.required"),
        log.event("message.committed", message(3, "tool", "Paris", tool_call_id="c_loc")),
        log.event("turn.resumed"),
        log.event(
            "message.committed",
            message(4, "assistant", "You are in Paris.", reply_stream={"attempt": 0, "text": [17]}),
        ),
        log.event("turn.completed"),
    ]
    first = render(items)
    assert first[-1]["type"] == "response.completed"
    assert [e["item"]["type"] for e in first if e["type"] == "response.output_item.done"] == [
        "function_call"
    ]
    second = render(items, segment=1)
    assert numbers(second) == list(range(len(second)))
    assert [e["type"] for e in second][:2] == ["response.created", "response.in_progress"]
    done = [e for e in second if e["type"] == "response.output_text.done"]
    assert [e["text"] for e in done] == ["You are in Paris."]
