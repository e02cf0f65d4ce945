"""The Anthropic Messages bodies the fake LLM answers with: messages, stream events in the order
Anthropic sends them, and error bodies, all made from the same steps as the OpenAI ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from app.testing.fake_llm.payloads import estimate_tokens, pieces_of, split_text
from app.testing.fake_llm.script import JSON, Step, messages_text

# A step's finish_reason is written the OpenAI way; one Anthropic has no word for goes verbatim.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# The wording Anthropic uses, which litellm and the worker's retry policy read.
ERROR_MESSAGES = {
    "rate_limit_error": "Rate limit exceeded",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
}

Event = tuple[str, JSON]


def error_type_of(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, step: Step) -> JSON:
    """The error body for HTTP `status`, and for the `event: error` of a failing stream."""
    error_type = step.get("type", error_type_of(status))
    message = step.get("message") or ERROR_MESSAGES.get(error_type, f"fake_llm: HTTP {status}")
    return {"type": "error", "error": {"type": error_type, "message": message}}


def overflow_step(tokens: int, window: int) -> Step:
    """Anthropic's answer to a prompt longer than the model's window (HTTP 400)."""
    return {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {tokens} tokens > {window} maximum",
    }


def tool_input(call: JSON) -> JSON:
    """A call's `input`, which Anthropic sends as an object, never as text: arguments given as a
    string that is not a JSON object arrive wrapped as `{"_raw": the string}`."""
    arguments = call.get("arguments", {})
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def content_of(step: Step) -> list[JSON]:
    if step.get("empty_choices"):
        return []
    blocks: list[JSON] = []
    if step.get("text"):
        blocks.append({"type": "text", "text": step["text"]})
    for i, call in enumerate(step.get("tool_calls") or []):
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id", f"toolu_fake_{i}"),
                "name": call["name"],
                "input": tool_input(call),
            }
        )
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return blocks


def stop_reason_of(step: Step) -> str:
    if "finish_reason" in step:
        reason = str(step["finish_reason"])
        return STOP_REASONS.get(reason, reason)
    return "tool_use" if step.get("tool_calls") else "end_turn"


def usage_of(body: JSON, step: Step) -> JSON:
    produced = "".join(
        block["name"] + json.dumps(block["input"]) if block["type"] == "tool_use" else block["text"]
        for block in content_of(step)
    )
    prompt = int(step.get("prompt_tokens") or estimate_tokens(messages_text(body)))
    usage: JSON = {"input_tokens": prompt, "output_tokens": estimate_tokens(produced)}
    if "cache" in step:
        read, written = step["cache"]["read"], step["cache"]["written"]
        usage.update(
            input_tokens=max(0, prompt - read - written),
            cache_read_input_tokens=read,
            cache_creation_input_tokens=written,
        )
    return usage


def message_of(body: JSON, step: Step, content: list[JSON] | None = None) -> JSON:
    return {
        "id": f"msg_fake_{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake-model"),
        "content": content_of(step) if content is None else content,
        "stop_reason": stop_reason_of(step),
        "stop_sequence": None,
        "usage": usage_of(body, step),
    }


def stream_events(body: JSON, step: Step) -> Iterator[Event]:
    """Yield (event name, data) pairs in the order Anthropic streams them, message_stop last."""
    usage = usage_of(body, step)
    start = message_of(body, step, content=[])
    # Anthropic streams the start with no stop reason and the first output token counted.
    start.update(stop_reason=None, usage={**usage, "output_tokens": 1})
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(content_of(step)):
        if block["type"] == "tool_use":
            yield from tool_use_events(index, block)
        else:
            yield from text_events(index, block["text"], pieces_of(step))
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason_of(step), "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def text_events(index: int, text: str, parts: int = 3) -> Iterator[Event]:
    yield block_event("content_block_start", index, content_block={"type": "text", "text": ""})
    for piece in split_text(text, parts):
        yield block_event("content_block_delta", index, delta={"type": "text_delta", "text": piece})
    yield block_event("content_block_stop", index)


def tool_use_events(index: int, block: JSON) -> Iterator[Event]:
    # The input always starts empty and arrives as JSON text fragments, as Anthropic sends it.
    yield block_event("content_block_start", index, content_block={**block, "input": {}})
    for fragment in split_text(json.dumps(block["input"])):
        delta = {"type": "input_json_delta", "partial_json": fragment}
        yield block_event("content_block_delta", index, delta=delta)
    yield block_event("content_block_stop", index)


def block_event(kind: str, index: int, **fields: Any) -> Event:
    return kind, {"type": kind, "index": index, **fields}
