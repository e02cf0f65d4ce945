"""The events that show a response's output items, each numbered (`sequence_number`): a message's
block (added, its text part, each delta, done), an `mcp_call`'s (added, its arguments, in
progress, then completed or failed), an item shown at once (a `function_call` with its arguments
in one delta, an approval request). Pure: `stream.ResponseEvents` decides which and when.

A message's block is numbered from its own base (`at`: a reply's attempt has numbers of its
own, see `stream.py`); every other event takes the next number after the last (`Numbering`).
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]


class Numbering:
    """The last number given; `next` gives the one after it."""

    def __init__(self) -> None:
        self.last = -1

    def next(self, kind: str, **fields: Any) -> Event:
        self.last += 1
        return {"type": kind, "sequence_number": self.last, **fields}


def at(number: int, kind: str, **fields: Any) -> Event:
    return {"type": kind, "sequence_number": number, **fields}


def open_message(base: int, index: int, item_id: str) -> list[Event]:
    """A message's block opened: its item (in progress, empty) and its text part."""
    item = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return [
        at(base, "response.output_item.added", output_index=index, item=item),
        at(
            base + 1,
            "response.content_part.added",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part=part,
        ),
    ]


def text_delta(number: int, index: int, item_id: str, piece: str) -> Event:
    return at(
        number,
        "response.output_text.delta",
        item_id=item_id,
        output_index=index,
        content_index=0,
        delta=piece,
        logprobs=[],
    )


def message_done(number: int, index: int, item: dict[str, Any]) -> list[Event]:
    """A message's block closed from `number` on: its text, its part, its item, done."""
    item_id = item["id"]
    text = item["content"][0]["text"]
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return [
        at(
            number,
            "response.output_text.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            text=text,
            logprobs=[],
        ),
        at(
            number + 1,
            "response.content_part.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part=part,
        ),
        at(number + 2, "response.output_item.done", output_index=index, item=item),
    ]


def message_dropped(number: int, index: int, item_id: str, text: str) -> Event:
    """A live reply's block closed `incomplete`, with the text it had shown."""
    item = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }
    return at(number, "response.output_item.done", output_index=index, item=item)


def mcp_call_added(numbering: Numbering, index: int, item: dict[str, Any]) -> list[Event]:
    item_id = item["id"]
    start = {**item, "status": "in_progress", "output": None, "error": None}
    return [
        numbering.next("response.output_item.added", output_index=index, item=start),
        numbering.next(
            "response.mcp_call_arguments.delta",
            item_id=item_id,
            output_index=index,
            delta=item["arguments"],
        ),
        numbering.next(
            "response.mcp_call_arguments.done",
            item_id=item_id,
            output_index=index,
            arguments=item["arguments"],
        ),
        numbering.next("response.mcp_call.in_progress", item_id=item_id, output_index=index),
    ]


def mcp_call_done(numbering: Numbering, index: int, item: dict[str, Any]) -> list[Event]:
    kind = (
        "response.mcp_call.failed" if item["status"] == "failed" else "response.mcp_call.completed"
    )
    return [
        numbering.next(kind, item_id=item["id"], output_index=index),
        numbering.next("response.output_item.done", output_index=index, item=item),
    ]


def whole_item(numbering: Numbering, index: int, item: dict[str, Any]) -> list[Event]:
    """An item shown at once: a function_call (its arguments in one delta), an approval
    request."""
    if item["type"] != "function_call":
        return [
            numbering.next("response.output_item.added", output_index=index, item=item),
            numbering.next("response.output_item.done", output_index=index, item=item),
        ]
    start = {**item, "arguments": "", "status": "in_progress"}
    return [
        numbering.next("response.output_item.added", output_index=index, item=start),
        numbering.next(
            "response.function_call_arguments.delta",
            item_id=item["id"],
            output_index=index,
            delta=item["arguments"],
        ),
        numbering.next(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            name=item["name"],
            arguments=item["arguments"],
        ),
        numbering.next("response.output_item.done", output_index=index, item=item),
    ]


__all__ = [
    "Event",
    "Numbering",
    "at",
    "mcp_call_added",
    "mcp_call_done",
    "message_done",
    "message_dropped",
    "open_message",
    "text_delta",
    "whole_item",
]
