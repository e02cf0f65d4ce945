"""A streamed model reply put together: each chunk's text and tool-call fragments go to the sink
as they arrive, and the complete reply (text, calls with their raw arguments, finish reason,
usage) is built from the same fragments, so what is committed is exactly what was streamed.

Reads the chunks of litellm's provider iterators: OpenAI-shaped ones (`choices[0].delta.content`,
`.tool_calls[i]` with `index`, `id`, `function.name`, `function.arguments`; `finish_reason`;
`usage`, on its own chunk or with another), and litellm's generic chunks, plain dicts (`text`,
`tool_use`, `finish_reason`, `usage`: custom providers such as the demo model, and a closing one
of some routes). Cheaper than `litellm.stream_chunk_builder`, which re-parses every chunk once
the stream ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.worker.plan import ToolCall
from app.worker.ports import ModelReply, ReplySink, Usage


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ReplyAssembler:
    """Feed it every chunk (`add`), then take the `reply`."""

    def __init__(self, sink: ReplySink) -> None:
        self.sink = sink
        self.chunks = 0
        self.choices = 0  # chunks that carried some of a reply: none at all is no reply
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._finish_reason: str | None = None
        self._usage = Usage()

    def add(self, chunk: Any) -> None:
        self.chunks += 1
        if isinstance(chunk, dict):
            self._add_generic(chunk)
            return
        self._count(getattr(chunk, "usage", None))
        choices = getattr(chunk, "choices", None)
        if not choices:
            return
        choice = choices[0]
        if choice.finish_reason is not None:
            self._finish_reason = str(choice.finish_reason)
        delta = choice.delta
        if delta is None:
            return
        if delta.role or delta.content or delta.tool_calls:
            # litellm makes up a closing chunk even for a provider's empty `choices`; a reply
            # begins with a role, text or a call
            self.choices += 1
        content = delta.content
        if content:
            text = content if isinstance(content, str) else str(content)
            self._text.append(text)
            self.sink.text(text)
        for call in delta.tool_calls or ():
            self._add_call(call)

    def _add_generic(self, chunk: dict[str, Any]) -> None:
        """litellm's GenericStreamingChunk: text, one tool call, the finish, the usage."""
        self._count(chunk.get("usage"))
        text = chunk.get("text") or ""
        call = chunk.get("tool_use")
        if text or call:
            self.choices += 1
        if text:
            self._text.append(text)
            self.sink.text(text)
        if call:
            function = call.get("function") or {}
            self._add_call(_Delta(call.get("index") or 0, call.get("id"), function))
        # A route's closing dict says "stop" whatever came before: the first reason stands.
        if chunk.get("finish_reason") and self._finish_reason is None:
            self._finish_reason = str(chunk["finish_reason"])

    def _count(self, usage: Any) -> None:
        """The latest usage seen wins (Anthropic counts the input first, the output last)."""
        if usage is None:
            return
        prompt, completion = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
        if prompt or completion:
            self._usage = Usage(prompt, completion, 0.0, *cache_tokens(usage))

    def _add_call(self, delta: Any) -> None:
        index = int(getattr(delta, "index", None) or 0)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call()
        function = delta.function
        new_id = delta.id if delta.id and not call.id else None
        new_name = _field(function, "name") or None
        if new_id:
            call.id = str(delta.id)
        if new_name:
            call.name += str(new_name)
        fragment = _field(function, "arguments") or ""
        if not isinstance(fragment, str):  # a provider that sends the arguments as an object
            fragment = json.dumps(fragment)
        if fragment:
            call.arguments.append(fragment)
        self.sink.call(index, new_id, new_name, fragment)

    def reply(self) -> ModelReply:
        """The complete reply (see `choices` for whether there was one at all)."""
        text = "".join(self._text)
        calls = tuple(
            ToolCall(call.id, call.name, "".join(call.arguments))
            for _, call in sorted(self._calls.items())
        )
        return ModelReply(
            content=text if text or not calls else None,
            tool_calls=calls,
            finish_reason=self._finish_reason,
            usage=self._usage,
        )


@dataclass(frozen=True)
class _Delta:
    """A generic chunk's tool call, shaped like an OpenAI tool-call delta."""

    index: int
    id: str | None
    function: dict[str, Any]


def _field(value: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of a dict."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _tokens(usage: Any, name: str) -> int:
    return int(_field(usage, name) or 0)


def cache_tokens(usage: Any) -> tuple[int, int]:
    """The prompt's tokens read from the provider's cache and written to it, as litellm maps
    them for every provider (`prompt_tokens_details.cached_tokens`; Anthropic's writes also as
    `cache_creation_input_tokens`)."""
    details = _field(usage, "prompt_tokens_details")
    read = _tokens(details, "cached_tokens") or _tokens(usage, "cache_read_input_tokens")
    written = _tokens(details, "cache_creation_tokens") or _tokens(
        usage, "cache_creation_input_tokens"
    )
    return read, written


__all__ = ["ReplyAssembler", "cache_tokens"]
