"""In-process implementations of the model and tool ports, for tests, benchmarks and examples.

`ScriptedModel` answers from a function of the request (or a list of replies), streaming each
reply to the sink word by word first; `InMemoryTools` runs plain Python callables. Both count what
they were asked, so tests can assert on it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.worker.plan import ToolCall
from app.worker.ports import (
    NO_SINK,
    CallRef,
    ModelError,
    ModelReply,
    ModelRequest,
    ReplySink,
    ToolDefinition,
    ToolResult,
    Usage,
)

Responder = Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]]


def text(content: str) -> ModelReply:
    return ModelReply(content, (), "stop", Usage(10, 5))


def calls(*tool_calls: tuple[str, str, dict[str, Any] | str]) -> ModelReply:
    """A reply asking for tools: `calls(("c1", "add", {"a": 1, "b": 2}))`."""
    made = tuple(
        ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args))
        for call_id, name, args in tool_calls
    )
    return ModelReply(None, made, "tool_calls", Usage(10, 5))


def by_iteration(replies: Sequence[ModelReply | Exception]) -> Responder:
    """Answer with reply N where N is the number of assistant messages since the last user one.

    A pure function of the transcript, so a resumed run gets the same answers as a fresh one.
    """

    def respond(request: ModelRequest) -> ModelReply:
        count = 0
        for message in reversed(request.messages):
            if message["role"] == "user":
                break
            count += message["role"] == "assistant"
        reply = replies[min(count, len(replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        return reply

    return respond


class ScriptedModel:
    """A `ModelClient` whose answers come from a responder; it records every request unless told
    not to (a benchmark's model must not hold every history it was sent)."""

    def __init__(
        self,
        responder: Responder,
        *,
        record: bool = True,
        word_delay: float = 0.0,
        window: int | None = None,
        schema_models: frozenset[str] = frozenset(),
    ) -> None:
        self.responder = responder
        self.schema_models = schema_models  # the models it says take a response schema
        self.record = record
        self.word_delay = word_delay  # seconds between two streamed words
        self.window = window  # the input window it says every model has (None: unknown)
        self.requests: list[ModelRequest] = []

    def context_window(self, model: str) -> int | None:
        return self.window

    def takes_schema(self, model: str) -> bool:
        return model in self.schema_models

    def takes_file(self, model: str, kind: str) -> bool:
        return False  # (what a scripted model is sent of files is described in text)

    async def complete(self, request: ModelRequest, sink: ReplySink = NO_SINK) -> ModelReply:
        if self.record:
            self.requests.append(request)
        reply = self.responder(request)
        if isinstance(reply, Awaitable):
            reply = await reply
        if sink is not NO_SINK:
            await self._stream(reply, sink)
        return reply

    async def _stream(self, reply: ModelReply, sink: ReplySink) -> None:
        for word in re.findall(r"\S+\s*|\s+", reply.content or ""):
            sink.text(word)
            if self.word_delay:
                await asyncio.sleep(self.word_delay)
        for index, call in enumerate(reply.tool_calls):
            sink.call(index, call.id, call.name, call.arguments)


#: What a pure function says of itself: it only reads, so a call may simply run again.
READ_ONLY = {"readOnlyHint": True}


class InMemoryTools:
    """A `ToolProvider` of Python callables; a callable that raises gives an error result."""

    def __init__(
        self,
        tools: dict[str, Callable[..., Any]],
        descriptions: dict[str, str] | None = None,
        *,
        annotations: dict[str, dict[str, Any]] | None = None,
        approval: Sequence[str] = (),
    ):
        self.tools = tools
        self.descriptions = descriptions or {}
        self.annotations = annotations or {}
        self.approval = frozenset(approval)  # tools whose calls the user approves first
        self.executed: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    async def definitions(self) -> list[ToolDefinition]:
        return [
            ToolDefinition(
                name=name,
                description=self.descriptions.get(name, name),
                input_schema={"type": "object", "properties": {}},
                server="memory",
                original_name=name,
                annotations=self.annotations.get(name, {}),
                requires_approval=name in self.approval,
            )
            for name in self.tools
        ]

    async def execute(
        self, name: str, arguments: dict[str, Any], call: CallRef | None = None
    ) -> ToolResult:
        self.executed.append((name, arguments))
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(f"Unknown tool: {name}", is_error=True)
        try:
            value = tool(**arguments)
            if isinstance(value, Awaitable):
                value = await value
        except Exception as exc:
            return ToolResult(f"Tool {name} failed: {exc}", is_error=True)
        if isinstance(value, ToolResult):  # (a tool that returns images, blobs: its media)
            return value
        return ToolResult(value if isinstance(value, str) else json.dumps(value))

    async def close(self) -> None:
        self.closed = True


__all__ = ["InMemoryTools", "ModelError", "ScriptedModel", "by_iteration", "calls", "text"]
