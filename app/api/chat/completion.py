"""A response of the Responses dialect written as a Chat Completions `chat.completion`. Pure.

    the response's output            the completion's message
    -------------------------------  ----------------------------------------------------------
    `message` items (the replies)    `content`: their texts, joined by a blank line
    `function_call` items            `tool_calls` (`finish_reason: "tool_calls"`): the client
                                     runs them and sends their outputs as tool messages
    `mcp_call` items                 nothing: the worker ran them inside the turn
    status completed / cancelled     `finish_reason: "stop"` (a cancelled turn's replies so far)
    status failed                    no completion: an error (`TurnFailed`)

`reply_text` is the content, for `create.py` to recognise a reply the client sends back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.api.responses.errors import Unsupported

SEPARATOR = "\n\n"  # between two replies of one response (text around a worker's tool call)


class TurnFailed(Unsupported):
    """The turn behind a completion failed: its error, in OpenAI's shape."""


def completion_id(response_id: str) -> str:
    return f"chatcmpl-{response_id}"


def reply_text(output: Sequence[dict[str, Any]]) -> str:
    return SEPARATOR.join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part.get("type") == "output_text"
    )


def tool_calls(output: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in output
        if item["type"] == "function_call"
    ]


def usage(response: dict[str, Any]) -> dict[str, Any]:
    """The turn's tokens so far, as Chat Completions counts them."""
    given = response.get("usage") or {}
    prompt, completion = given.get("input_tokens", 0), given.get("output_tokens", 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": (given.get("input_tokens_details") or {}).get("cached_tokens", 0),
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def completion(response: dict[str, Any]) -> dict[str, Any]:
    """The completion of a response that rests (ended, or paused for the client's tools)."""
    if response["status"] == "failed":
        error = response.get("error") or {}
        raise TurnFailed(f"the turn failed: {error.get('message') or 'no reason was recorded'}")
    output = response["output"]
    calls = tool_calls(output)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply_text(output) or (None if calls else ""),
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id(response["id"]),
        "object": "chat.completion",
        "created": int(response["created_at"]),
        "model": response["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": usage(response),
        "system_fingerprint": None,
        "service_tier": "default",
    }


__all__ = ["TurnFailed", "completion", "completion_id", "reply_text", "tool_calls", "usage"]
