"""A streamed model reply put together: each chunk's text and tool-call fragments go to the sink
as they arrive, and the complete reply (text, calls with their raw arguments, finish reason,
usage) is built from the same fragments, so what is committed is exactly what was streamed.

Reads litellm's OpenAI-shaped stream chunks (`choices[0].delta.content`, `.tool_calls[i]` with
`index`, `id`, `function.name`, `function.arguments`; `finish_reason`; `usage` on the last chunk
when asked for), whatever the provider underneath. Cheaper than `litellm.stream_chunk_builder`,
which re-parses every chunk once the stream ends.
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
        usage = getattr(chunk, "usage", None)
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            self._usage = Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0))
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

    def _add_call(self, delta: Any) -> None:
        index = int(getattr(delta, "index", None) or 0)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call()
        function = delta.function
        new_id = delta.id if delta.id and not call.id else None
        new_name = function.name if function is not None and function.name else None
        if new_id:
            call.id = str(delta.id)
        if new_name:
            call.name += str(new_name)
        fragment = (function.arguments if function is not None else None) or ""
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


__all__ = ["ReplyAssembler"]
