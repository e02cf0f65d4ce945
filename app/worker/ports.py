"""The outside systems the loop talks to, as interfaces: the model, the tools and the database.

The real adapters are `llm.LiteLLMClient`, `mcp.McpToolProvider` and `store.TurnStore`; tests and
benchmarks plug in in-process implementations of the model's and the tools' protocols.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.errors import ChatWorkerError
from app.worker.plan import ToolCall

if TYPE_CHECKING:  # (the store's values: it implements this port, and imports this module)
    from sqlalchemy import Engine

    from app.worker.store.clock import Clock
    from app.worker.store.driver import Deferred
    from app.worker.store.outputs import ListedOutput, OutputPage
    from app.worker.store.records import (
        Claim,
        Committed,
        CompactionRecord,
        KeptOutput,
        Snapshot,
        Steering,
    )
    from app.worker.transcript import Transcript

# --- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRequest:
    """One chat-completions call: `tools` in the function-tool format, empty for none."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    # `auto`, `none`, `required`, or the tool named ({"type": "function", "function": ...})
    tool_choice: str | dict[str, Any] = "auto"
    # Marks the request's stable prefix for the provider's prompt cache, keyed by this (the
    # conversation); None: no marks.
    cache_key: str | None = None
    # OpenAI's `response_format` (a JSON Schema the answer must match), for a model that takes
    # one (`ModelClient.takes_schema`); None: free text.
    response_format: dict[str, Any] | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0  # every input token, those read from or written to a cache included
    completion_tokens: int = 0
    # What the call cost in US dollars, from litellm's price data; None when the model's price
    # is unknown (stored as unknown, never as zero: a total with an unknown part is unknown).
    cost_usd: float | None = 0.0
    cached_tokens: int = 0  # of the prompt, read from the provider's prompt cache
    cache_write_tokens: int = 0  # of the prompt, written to it (Anthropic bills them higher)

    def as_json(self, model: str | None = None) -> dict[str, Any]:
        """What a message keeps of the call that wrote it (`messages.usage`): with `model`,
        the model that answered (a fallback's when the turn moved to one)."""
        found = {} if model is None else {"model": model}
        return found | {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True)
class ModelReply:
    """What the model answered: text, tool calls (raw arguments), or both."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage = Usage()


class ReplySink(Protocol):
    """Where a model call sends its reply as it forms (the live preview); never the reply itself,
    which `complete` returns whole."""

    def text(self, fragment: str) -> None:
        """More of the reply's text."""
        ...

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        """More of tool call `index`: its id and name when they first arrive, then arguments."""
        ...

    def restart(self, reason: str) -> None:
        """What was sent so far is void: the call starts over (a transient error, retried)."""
        ...


class _Unheard:
    def text(self, fragment: str) -> None:
        pass

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        pass

    def restart(self, reason: str) -> None:
        pass


NO_SINK: ReplySink = _Unheard()  # nobody is listening: the reply arrives whole


class ModelError(ChatWorkerError):
    """The model call failed for good (not transient, or retries spent).

    The message is readable and never contains a credential; it becomes the conversation's error.
    `may_fall_back`: the provider was down (a connection error, a 5xx, a timeout) or its
    transient errors spent their retries: another model may answer (plan row 30).
    """

    def __init__(self, message: str, *, may_fall_back: bool = False) -> None:
        super().__init__(message)
        self.may_fall_back = may_fall_back


class ContextOverflow(ModelError):
    """The provider refused the request as longer than the model's context window; `window` is
    the window its error stated, when it stated one. The turn compacts and tries once more."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


class ModelClient(Protocol):
    async def complete(self, request: ModelRequest, sink: ReplySink = NO_SINK) -> ModelReply:
        """Call the model, sending the reply to `sink` as it forms; raise `ModelError` when the
        turn cannot go on (`ContextOverflow` when the request was too long for the model)."""
        ...

    def context_window(self, model: str) -> int | None:
        """The model's input window in tokens; None when unknown."""
        ...

    def takes_schema(self, model: str) -> bool:
        """Whether the model has a structured-output mode (a `response_format` JSON Schema)."""
        ...

    def takes_file(self, model: str, kind: str) -> bool:
        """Whether the model reads files of `kind` (`image`, `pdf`) in its input."""
        ...


# --- the tools --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as offered to the model. `name` is unique across servers."""

    name: str
    description: str
    input_schema: dict[str, Any]
    server: str = ""
    original_name: str = ""
    # What the tool says of itself (MCP: readOnlyHint, destructiveHint, idempotentHint, ...).
    annotations: dict[str, Any] = field(default_factory=dict)
    requires_approval: bool = False  # the user approves each call first (the server's policy)

    @property
    def is_read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True

    @property
    def may_rerun(self) -> bool:
        """A call that ran may simply run again: the tool says it only reads, or that running
        it twice has the effect of running it once (`idempotentHint`)."""
        return self.is_read_only or self.annotations.get("idempotentHint") is True

    @property
    def is_destructive(self) -> bool:
        """It says it may destroy (`destructiveHint`), and does not say it only reads."""
        return self.annotations.get("destructiveHint") is True and not self.is_read_only

    def as_function_tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True)
class CallRef:
    """Which call of which conversation a tool run answers. The same call run again (its worker
    died before the result was committed) has the same ref: a tool can key its side effect on
    `idempotency_key` to apply it once (MCP tools get it in the request's `_meta`)."""

    conversation_id: uuid.UUID
    call_id: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.conversation_id}:{self.call_id}"


TOOL_OK, TOOL_ERROR, TOOL_TIMEOUT, TOOL_UNAVAILABLE = "ok", "error", "timeout", "unavailable"


@dataclass(frozen=True)
class ToolMedia:
    """A binary part of a tool's result (an MCP image, audio, an embedded blob resource),
    kept whole as a file; `content` describes it in the text the model reads."""

    media_type: str
    data: bytes
    name: str | None = None


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False
    # How the call went, for the metrics: ok, error (the tool said so, or raised), timeout, or
    # unavailable (unknown tool, server down or stopped during the call); default from is_error.
    outcome: str = field(default="", compare=False)
    media: tuple[ToolMedia, ...] = field(default=(), compare=False)

    @property
    def kind(self) -> str:
        return self.outcome or (TOOL_ERROR if self.is_error else TOOL_OK)


class ToolProvider(Protocol):
    async def definitions(self) -> list[ToolDefinition]:
        """Every tool available, with unique names (cached by the provider)."""
        ...

    async def execute(
        self, name: str, arguments: dict[str, Any], call: CallRef | None = None
    ) -> ToolResult:
        """Run a tool (for `call`, when the run answers one). Tool-level failures (unknown
        tool, tool error, timeout, dead server) come back as `ToolResult(is_error=True)`; this
        never raises for them."""
        ...

    async def close(self) -> None:
        """Stop every server this provider started."""
        ...


# --- the database -----------------------------------------------------------------------------


class TurnStore(Protocol):
    """The database as a running turn sees it (`store.TurnStore` is the real one; its methods
    say what each does): the claim, the fenced writes of each step, the reads a step makes.
    Synchronous: called on the database threads, a step's write through `loop_bridge.run`."""

    engine: Engine
    clock: Clock

    @property
    def steps_on_loop(self) -> bool: ...
    def close(self) -> None: ...
    def warm(self, owner_limited: bool = False, connections: int = 1) -> None: ...

    # the claim
    def claim(
        self, conversation_id: uuid.UUID, owner: str, ttl: float, owner_limit: int | None = None
    ) -> Snapshot | Deferred | None: ...
    def keep_history(self, claim: Claim, transcript: Transcript) -> None: ...

    # the fenced writes
    def heartbeat(self, claim: Claim, ttl: float) -> Committed: ...
    def release(self, claim: Claim) -> None: ...
    def record_tool_calls(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str | None,
        calls: Sequence[ToolCall],
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed: ...
    def record_tool_result(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        call: ToolCall,
        content: str,
        is_error: bool,
        ttl: float,
        kept: KeptOutput | None = None,
        files: Sequence[dict[str, Any]] = (),
    ) -> Committed: ...
    def record_answer(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        usage: Usage,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
        output: Any = None,
    ) -> Committed: ...
    def record_refused(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        error: str,
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed: ...
    def fall_back(
        self,
        claim: Claim,
        *,
        from_model: str,
        to_model: str,
        error: str,
        ttl: float,
        usage: Usage | None = None,
    ) -> Committed: ...
    def finish(self, claim: Claim, *, status: str) -> Committed: ...
    def starting(self, claim: Claim, call_id: str, ttl: float) -> Committed: ...
    def pause(
        self, claim: Claim, *, status: str, actions: Sequence[dict[str, Any]]
    ) -> Committed: ...
    def compact(self, claim: Claim, record: CompactionRecord, *, ttl: float) -> Committed: ...
    def steer(
        self,
        claim: Claim,
        steering: Steering,
        *,
        status: str,
        seq: int,
        parent: int | None,
        ttl: float,
    ) -> Committed: ...
    def cancel(self, claim: Claim, *, status: str) -> Committed: ...
    def fail(
        self, claim: Claim, error: str, *, status: str, usage: Usage | None = None
    ) -> Committed: ...

    # the reads
    def budget_used_up(self, conversation_id: uuid.UUID) -> str | None: ...
    def next_steer(self, conversation_id: uuid.UUID) -> Steering | None: ...
    def cached_outputs(
        self, conversation_id: uuid.UUID, *, tool: str | None = None, limit: int = 50
    ) -> tuple[list[ListedOutput], int]: ...
    def cached_output(
        self, conversation_id: uuid.UUID, call_id: str, *, offset: int, limit: int
    ) -> OutputPage | None: ...
    def keep_files(
        self, conversation_id: uuid.UUID, media: Sequence[ToolMedia]
    ) -> list[dict[str, Any]]: ...
    def read_files(
        self, conversation: uuid.UUID, ids: Collection[uuid.UUID]
    ) -> dict[Any, bytes]: ...
