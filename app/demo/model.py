"""The built-in offline demo model: a deterministic litellm provider named `demo` (`demo/offline`).
It lets the whole loop, tools included, run with no network and no API key; it is no real model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from functools import cache
from typing import Any

DEMO_PROVIDER = "demo"
DEFAULT_DEMO_MODEL = "demo/offline"
PREFIX = "[demo model] "
HINT = (
    "(This is the built-in offline demo model. Set a real model string such as "
    "openai/gpt-4o-mini and its API key to talk to a real provider.)"
)
MAX_QUERY_CHARS = 200
MAX_RESULT_CHARS = 300
MAX_ECHO_CHARS = 500
WORD_DELAY_S = 0.02  # a streamed reply comes word by word, as a real model's would
WORD = re.compile(r"\S+\s*|\s+")
# A run of digits, operators and parentheses; it is an expression if an operator joins two operands.
EXPRESSION_RUN = re.compile(r"[\d.\s+\-*/%()]+")
OPERATOR_BETWEEN_OPERANDS = re.compile(r"[\d)]\s*(?:\*\*|//|[-+*/%])\s*[-(\d.]")


# --- the decisions, pure ----------------------------------------------------------------------


def demo_reply(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], tool_choice: Any = None
) -> dict[str, Any]:
    """The demo model's answer: `{"message": {...}, "finish_reason": ..., "usage": {...}}`.

    A pure function of the request: a user message with tools offered gets one tool call
    (`calculate` for arithmetic, else `search_docs`, else an argument-free first tool); tool
    results get a text summary of them; anything else gets its user text echoed.
    `tool_choice` as OpenAI's: `none` calls nothing; `required`, or a function named
    (`{"type": "function", "function": {"name": ...}}`), always calls one after a user message
    (the named one, or the usual choice, else the first tool), its arguments built from its
    schema when nothing better fits.
    """
    last = messages[-1] if messages else {}
    call = None
    if last.get("role") == "user" and tool_choice != "none":
        forced = _forced(tools, tool_choice)
        call = _choose_call(last, forced or tools, messages)
        if call is None and (forced or tool_choice == "required") and tools:
            call = _schema_call((forced or tools)[0], last, messages)
    if call is not None:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        produced = call["function"]["name"] + call["function"]["arguments"]
        finish_reason = "tool_calls"
    else:
        text = _summary(messages) if last.get("role") == "tool" else _echo(messages)
        message = {"role": "assistant", "content": text}
        produced = text
        finish_reason = "stop"
    return {"message": message, "finish_reason": finish_reason, "usage": _usage(messages, produced)}


def _choose_call(
    user: dict[str, Any], tools: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]]
) -> dict[str, Any] | None:
    text = _text(user.get("content")).strip()
    functions = [tool.get("function") or {} for tool in tools]
    expression = find_expression(text)
    calculate = _offered(functions, "calculate")
    search = _offered(functions, "search_docs")
    if expression and calculate is not None:
        name, arguments = calculate["name"], {_first_param(calculate, "expression"): expression}
    elif search is not None:
        name, arguments = search["name"], {"query": text[:MAX_QUERY_CHARS]}
    elif functions and not (functions[0].get("parameters") or {}).get("required"):
        name, arguments = str(functions[0].get("name", "")), {}
    else:
        return None
    return _call(name, arguments, messages)


def _forced(tools: Sequence[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]]:
    """The tool a `tool_choice` names (none when it names none, or none offered)."""
    if not isinstance(tool_choice, dict):
        return []
    name = (tool_choice.get("function") or {}).get("name", tool_choice.get("name"))
    return [tool for tool in tools if (tool.get("function") or {}).get("name") == name]


def _schema_call(
    tool: dict[str, Any], user: dict[str, Any], messages: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """A call of `tool` with an argument for each required parameter, by its schema: the user's
    text for a string, the first of an enum, zero, false or empty for the rest."""
    function = tool.get("function") or {}
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    text = _text(user.get("content")).strip()[:MAX_QUERY_CHARS]
    arguments = {
        str(name): _value_for(properties.get(name) or {}, text)
        for name in parameters.get("required") or []
    }
    return _call(str(function.get("name", "")), arguments, messages)


def _value_for(schema: dict[str, Any], text: str) -> Any:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return {"integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}.get(
        str(kind), text
    )


def _call(
    name: str, arguments: dict[str, Any], messages: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    call_id = f"demo_call_{sum(1 for m in messages if m.get('role') == 'assistant')}"
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def find_expression(text: str) -> str | None:
    """The first arithmetic expression in `text` (digits joined by operators), if any."""
    for run in EXPRESSION_RUN.findall(text):
        candidate = _trim_parentheses(run.strip())
        if OPERATOR_BETWEEN_OPERANDS.search(candidate):
            return candidate
    return None


def _trim_parentheses(text: str) -> str:
    # "(about 2+2)" yields the run " 2+2)": drop the parenthesis that belongs to the prose.
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1].rstrip()
    while text.startswith("(") and text.count("(") > text.count(")"):
        text = text[1:].lstrip()
    return text


def _offered(functions: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    # Tool names may carry a server prefix ("tools__calculate") when servers share a name.
    pattern = re.compile(rf"(?:^|[_.\-/]){re.escape(name)}$")
    return next((f for f in functions if pattern.search(str(f.get("name", "")))), None)


def _first_param(function: dict[str, Any], default: str) -> str:
    required = (function.get("parameters") or {}).get("required") or [default]
    return str(required[0])


def _summary(messages: Sequence[dict[str, Any]]) -> str:
    results = _trailing_tool_results(messages)
    names = _call_names(messages)
    lines = [
        f"From {names.get(m.get('tool_call_id'), m.get('name') or 'a tool')}: "
        f"{_text(m.get('content')).strip()[:MAX_RESULT_CHARS]}"
        for m in results
    ]
    return PREFIX + "\n".join(lines)


def _trailing_tool_results(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    return results[::-1]


def _call_names(messages: Sequence[dict[str, Any]]) -> dict[Any, str]:
    return {
        call.get("id"): str((call.get("function") or {}).get("name", "a tool"))
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    }


def _echo(messages: Sequence[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    said = _text(users[-1].get("content")).strip()[:MAX_ECHO_CHARS] if users else ""
    return f"{PREFIX}You said: {said}\n\n{HINT}"


def _text(content: Any) -> str:
    """A message's text, whether a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _usage(messages: Sequence[dict[str, Any]], produced: str) -> dict[str, int]:
    prompt = max(1, len(json.dumps(list(messages), default=str)) // 4)
    completion = max(1, len(produced) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


# --- the litellm glue -------------------------------------------------------------------------


def register() -> None:
    """Register the provider with litellm, once (call it after `prepare_litellm`, which
    configures litellm before its first import): `demo/...` then answers offline."""
    import litellm

    if not any(item["provider"] == DEMO_PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append(
            {"provider": DEMO_PROVIDER, "custom_handler": demo_handler()}
        )


@cache
def demo_handler() -> Any:
    """The `litellm.CustomLLM` serving `demo/...`; litellm is imported on first use only."""
    from litellm.llms.custom_llm import CustomLLM

    class DemoLLM(CustomLLM):
        def completion(self, *args: Any, **kwargs: Any) -> Any:
            return _model_response(kwargs)

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return _model_response(kwargs)

        # Plain dicts shaped like litellm's GenericStreamingChunk; the base class declares
        # `astreaming` as a coroutine, but its stream wrapper consumes an async generator.
        def streaming(  # type: ignore[override]
            self, *args: Any, **kwargs: Any
        ) -> Iterator[dict[str, Any]]:
            yield from _stream_chunks(kwargs)

        async def astreaming(  # type: ignore[override]
            self, *args: Any, **kwargs: Any
        ) -> AsyncIterator[dict[str, Any]]:
            for chunk in _stream_chunks(kwargs):
                if chunk["text"]:
                    await asyncio.sleep(WORD_DELAY_S)
                yield chunk

    return DemoLLM()


def _reply_for(kwargs: dict[str, Any]) -> dict[str, Any]:
    optional = kwargs.get("optional_params") or {}
    return demo_reply(
        kwargs.get("messages") or [], optional.get("tools") or [], optional.get("tool_choice")
    )


def _model_response(kwargs: dict[str, Any]) -> Any:
    import litellm

    reply = _reply_for(kwargs)
    choice = {"index": 0, "finish_reason": reply["finish_reason"], "message": reply["message"]}
    return litellm.ModelResponse(
        model=f"{DEMO_PROVIDER}/{kwargs.get('model', 'offline')}",
        choices=[choice],
        usage=reply["usage"],
    )


def _stream_chunks(kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """litellm's `GenericStreamingChunk`s: the text word by word, or each tool call, then the
    finish."""
    reply = _reply_for(kwargs)
    message = reply["message"]
    for word in WORD.findall(message.get("content") or ""):
        yield _chunk(text=word)
    for index, call in enumerate(message.get("tool_calls") or ()):
        yield _chunk(tool_use={**call, "index": index})
    yield _chunk(is_finished=True, finish_reason=reply["finish_reason"], usage=reply["usage"])


def _chunk(
    *,
    text: str = "",
    tool_use: dict[str, Any] | None = None,
    is_finished: bool = False,
    finish_reason: str = "",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "text": text,
        "tool_use": tool_use,
        "is_finished": is_finished,
        "finish_reason": finish_reason,
        "usage": usage,
        "index": 0,
    }


__all__ = [
    "DEFAULT_DEMO_MODEL",
    "DEMO_PROVIDER",
    "demo_handler",
    "demo_reply",
    "find_expression",
    "register",
]
