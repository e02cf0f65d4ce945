"""The OpenAI chat-completions bodies the fake LLM answers with: completions, stream chunks in the
order OpenAI sends them, and error bodies litellm maps to the right exception.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from app.testing.fake_llm.script import JSON, Step, messages_text

# litellm maps any error whose text says "invalid_request_error" to BadRequestError whatever the
# status (OpenAI's own 401 escapes only through its "Incorrect API key provided" wording), so the
# 401/403/404 defaults use types that keep litellm's status-based mapping.
ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
# OpenAI's own wording for an error in the middle of a stream, which litellm and the worker's
# retry policy read (a step's `message` replaces it).
STREAM_ERROR_MESSAGES = {
    429: "Rate limit reached for requests",
    503: "The server is overloaded or not ready yet.",
    529: "The server is overloaded or not ready yet.",
}
DEFAULT_STREAM_ERROR_MESSAGE = "The server had an error while processing your request."


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def tool_call_arguments(call: JSON) -> str:
    arguments = call.get("arguments", "{}")
    # A string goes out verbatim so tests can send malformed JSON.
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def tool_calls_of(step: Step) -> list[JSON]:
    return [
        {
            "id": call.get("id", f"call_{i}"),
            "type": "function",
            "function": {"name": call["name"], "arguments": tool_call_arguments(call)},
        }
        for i, call in enumerate(step.get("tool_calls") or [])
    ]


def finish_reason_of(step: Step) -> str:
    if "finish_reason" in step:
        return str(step["finish_reason"])
    return "tool_calls" if step.get("tool_calls") else "stop"


def usage_of(body: JSON, step: Step) -> JSON:
    produced = (step.get("text") or "") + "".join(
        c["function"]["name"] + c["function"]["arguments"] for c in tool_calls_of(step)
    )
    prompt = int(step.get("prompt_tokens") or estimate_tokens(messages_text(body)))
    completion = estimate_tokens(produced)
    usage: JSON = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "cache" in step:
        usage["prompt_tokens_details"] = {"cached_tokens": step["cache"]["read"]}
    return usage


def envelope(body: JSON, obj: str) -> JSON:
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": obj,
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
    }


def completion_of(body: JSON, step: Step) -> JSON:
    calls = tool_calls_of(step)
    message: JSON = {"role": "assistant", "content": step.get("text")}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    choices = (
        []
        if step.get("empty_choices")
        else [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason_of(step),
                "logprobs": None,
            }
        ]
    )
    return {**envelope(body, "chat.completion"), "choices": choices, "usage": usage_of(body, step)}


def error_body(status: int, step: Step) -> JSON:
    default_type, default_code = ERROR_TYPES.get(status, ("server_error", "server_error"))
    return {
        "error": {
            "message": step.get("message", f"fake_llm: HTTP {status}"),
            "type": step.get("type", default_type),
            "param": None,
            "code": step.get("code", default_code),
        }
    }


def overflow_step(tokens: int, window: int) -> Step:
    """OpenAI's answer to a request longer than the model's window (HTTP 400)."""
    return {
        "message": f"This model's maximum context length is {window} tokens. However, your "
        f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }


def stream_error_body(status: int, spec: Step) -> JSON:
    """The `data:` line OpenAI sends when a stream fails after it started; `spec` is a step's
    `stream_error` (its `message`, `type` and `code` override the defaults)."""
    message = spec.get("message") or STREAM_ERROR_MESSAGES.get(status, DEFAULT_STREAM_ERROR_MESSAGE)
    return error_body(status, {**spec, "message": message})


def split_text(text: str, parts: int = 3) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def pieces_of(step: Step) -> int:
    """How many pieces a streamed text is sent in: the step's `chunks`, else 3."""
    return max(1, int(step.get("chunks", 3)))


def stream_chunks(body: JSON, step: Step) -> Iterator[JSON]:
    """Yield chat.completion.chunk objects in the order OpenAI streams them."""
    base = envelope(body, "chat.completion.chunk")

    def chunk(delta: JSON, finish: str | None = None) -> JSON:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if step.get("empty_choices"):
        yield {**base, "choices": []}
        return
    yield chunk({"role": "assistant", "content": ""})
    for piece in split_text(step.get("text") or "", pieces_of(step)):
        yield chunk({"content": piece})
    for index, call in enumerate(tool_calls_of(step)):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        for fragment in split_text(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, finish_reason_of(step))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": usage_of(body, step)}
