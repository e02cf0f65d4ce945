"""The model client: one chat-completions call through litellm, under the one retry policy
(`retry`), streamed by default so the reply reaches the live channel as it forms.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app import model_profile
from app.telemetry import logs, metrics
from app.worker.llm import windows
from app.worker.llm.retry import MAX_RETRY_AFTER_SECONDS, Sleep, call_with_retries
from app.worker.plan import ToolCall
from app.worker.ports import (
    NO_SINK,
    ContextOverflow,
    ModelError,
    ModelReply,
    ModelRequest,
    ReplySink,
    Usage,
)
from app.worker.reply import ReplyAssembler, cache_tokens

log = logging.getLogger("app.worker.llm")

NO_CHOICES_ERROR = "The model returned no choices"


def prepare_litellm() -> None:
    """Import and configure litellm once (providers of the project's own, the offline demo's,
    are registered where the worker is assembled: `app/worker/runtime.py`).

    The environment must be set before the first import: without it, importing litellm fetches
    the model cost map over the network and runs `load_dotenv()` on the working directory, and
    the cheaper route below is not taken. Each variable can be set otherwise beforehand.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # Anthropic's beta headers (structured output's `output_format` needs one) from litellm's
    # bundled table, not fetched from GitHub on the first such call.
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    # litellm's own HTTP handler for `openai/` instead of the OpenAI SDK, whose request transform
    # grows with the history (measured: 5.4 against 21 ms of CPU a call at 100 messages); and no
    # base64 scan of every message for the logs nobody reads.
    os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")
    os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
    with logs.unified("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        import litellm

    litellm.suppress_debug_info = True


class LiteLLMClient:
    """`ModelClient` over `litellm.acompletion`: any litellm model string (and a provider
    registered with litellm, as the runtime registers the demo's `demo/...`).

    With `stream` (the default) the reply is asked for as a stream, usage included, and each
    fragment goes to the call's sink as it arrives; the policy retries a transient error before
    or during the stream, and the sink hears that the partial reply is void."""

    def __init__(
        self,
        *,
        timeout: float,
        api_base: str | None = None,
        api_key: str | None = None,
        sleep: Sleep = asyncio.sleep,
        stream: bool = True,
        max_retry_after: float = MAX_RETRY_AFTER_SECONDS,
        file_kinds: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.timeout = timeout
        self.file_kinds = file_kinds or {}  # CHATWORKER_MODEL_FILE_KINDS, over litellm's map
        self.max_retry_after = max_retry_after
        self.api_base = api_base
        self.stream = stream
        self._api_key = api_key
        self._sleep = sleep

    def __repr__(self) -> str:
        return (
            f"LiteLLMClient(timeout={self.timeout!r}, api_base={self.api_base!r}, "
            f"stream={self.stream!r})"
        )

    def context_window(self, model: str) -> int | None:
        return windows.model_window(model)

    def takes_schema(self, model: str) -> bool:
        return takes_schema(model)

    def takes_file(self, model: str, kind: str) -> bool:
        # (the web side's own answer, `model_profile`: both sides agree)
        return model_profile.takes(model, kind, self.file_kinds)

    async def complete(self, request: ModelRequest, sink: ReplySink = NO_SINK) -> ModelReply:
        prepare_litellm()
        import litellm

        options = self._call_options(request)
        timed = _Timed(sink)

        async def whole() -> ModelReply:
            timed.attempt()
            return model_reply(await litellm.acompletion(**options))

        async def streamed() -> ModelReply:
            timed.attempt()
            return await _read_stream(await litellm.acompletion(**options, **STREAMED), timed)

        def on_retry(reason: str, wait: float, cause: str) -> None:
            metrics.MODEL_RETRIES.labels(request.model, cause).inc()
            sink.restart(f"{reason}; retrying in {wait:g} s")

        outcome = "error"
        try:
            reply = await call_with_retries(
                streamed if self.stream else whole,
                sleep=self._sleep,
                timeout=self.timeout,
                secrets=[self._api_key] if self._api_key else [],
                on_retry=on_retry,
                max_retry_after=self.max_retry_after,
            )
            outcome = "ok"
        except ContextOverflow as exc:
            if exc.window is not None:
                windows.learn(request.model, exc.window)
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            timed.observe(request.model, outcome)
        usage = reply.usage
        cost = price(request.model, usage)
        metrics.MODEL_TOKENS.labels(request.model, "prompt").inc(usage.prompt_tokens)
        metrics.MODEL_TOKENS.labels(request.model, "completion").inc(usage.completion_tokens)
        metrics.MODEL_TOKENS.labels(request.model, "cached").inc(usage.cached_tokens)
        if cost is None:
            metrics.MODEL_UNPRICED_CALLS.labels(request.model).inc()
        else:
            metrics.MODEL_COST.labels(request.model).inc(cost)
        return replace(reply, usage=replace(usage, cost_usd=cost))

    def _call_options(self, request: ModelRequest) -> dict[str, Any]:
        options: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "tools": request.tools or None,
            "tool_choice": request.tool_choice if request.tools else None,
            "timeout": self.timeout,
            # The one retry is the policy's (`retry`): the OpenAI SDK underneath would retry twice.
            "max_retries": 0,
        }
        if self.api_base:
            options["api_base"] = self.api_base
        if self._api_key:
            options["api_key"] = self._api_key
        if request.cache_key is not None:
            options.update(cache_marks(request.model, request.cache_key))
        if request.response_format is not None:
            options["response_format"] = request.response_format
        return options


STREAMED = {"stream": True, "stream_options": {"include_usage": True}}
_providers: dict[str, str] = {}


def cache_marks(model: str, key: str) -> dict[str, Any]:
    """The prompt cache's marks for the model's provider (`model_profile.cache_marks`), the
    provider as litellm reads it from the model string."""
    return model_profile.cache_marks(provider(model), model, key)


def provider(model: str) -> str:
    """litellm's provider of the model ('' when it names none), asked once per model."""
    found = _providers.get(model)
    if found is None:
        import litellm

        try:
            found = str(litellm.get_llm_provider(model)[1])
        except Exception:  # litellm: "LLM Provider NOT provided"
            found = ""
        _providers[model] = found
    return found


_SCHEMAS: dict[str, bool] = {}


def takes_schema(model: str) -> bool:
    """Whether litellm's model map says the model takes a response schema (structured output);
    asked once per model and process. An unknown model does not: it is told the schema."""
    found = _SCHEMAS.get(model)
    if found is None:
        prepare_litellm()
        import litellm

        try:
            found = bool(litellm.supports_response_schema(model=model))
        except Exception:  # litellm: an unknown provider
            found = False
        _SCHEMAS[model] = found
    return found


_UNPRICED: set[str] = set()  # models litellm has no price for (asked once per process)


def price(model: str, usage: Usage) -> float | None:
    """What a call cost in US dollars by litellm's price data (bundled with it: no network),
    its cached prompt tokens at the cached price (and cache writes at theirs); None when the
    model has no known price, never a guess of zero."""
    if model in _UNPRICED:
        return None
    import litellm

    try:
        prompt, completion = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cache_read_input_tokens=usage.cached_tokens,
            cache_creation_input_tokens=usage.cache_write_tokens,
        )
    except Exception:  # litellm: "This model isn't mapped yet"
        _UNPRICED.add(model)
        return None
    return float(prompt) + float(completion)


class _Timed:
    """A model call's sink that also notes when the first fragment of the current attempt came
    (its time to first token; a reply that is not streamed arrives whole, first token and all)."""

    def __init__(self, sink: ReplySink) -> None:
        self.sink = sink
        self.started = time.monotonic()
        self.attempt_started = self.started
        self.first: float | None = None

    def attempt(self) -> None:
        self.attempt_started, self.first = time.monotonic(), None

    def _heard(self) -> None:
        if self.first is None:
            self.first = time.monotonic()

    def text(self, fragment: str) -> None:
        self._heard()
        self.sink.text(fragment)

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        self._heard()
        self.sink.call(index, call_id, name, fragment)

    def restart(self, reason: str) -> None:
        self.sink.restart(reason)

    def observe(self, model: str, outcome: str) -> None:
        now = time.monotonic()
        metrics.MODEL_CALL_SECONDS.labels(model, outcome).observe(now - self.started)
        if outcome == "ok":
            first = self.first if self.first is not None else now
            metrics.MODEL_FIRST_TOKEN_SECONDS.labels(model).observe(first - self.attempt_started)


async def _read_stream(stream: Any, sink: ReplySink) -> ModelReply:
    """Every chunk to the sink as it comes, then the whole reply. The stream's connection is
    closed however this ends (a cancel, an error), so an aborted call stops at the provider.

    The chunks are read from the provider's own iterator under litellm's stream wrapper: the
    wrapper costs ~0.4 ms of CPU a chunk (pydantic objects, then its own rebuild and logging of
    the whole reply), 20 ms for a 50-token answer, against ~0.1 ms here. Its errors are raw, so
    they are mapped to litellm's exceptions (status codes included) the way the wrapper would."""
    assembler = ReplyAssembler(sink)
    chunks = getattr(stream, "completion_stream", None) or stream
    try:
        try:
            async for chunk in chunks:
                assembler.add(chunk)
        except Exception as exc:
            if chunks is stream:
                raise
            raise _mapped(stream, exc) from exc
    finally:
        await _close(stream)
    if not assembler.choices:
        raise ModelError(NO_CHOICES_ERROR)
    return assembler.reply()


def _mapped(stream: Any, exc: Exception) -> Exception:
    """The litellm exception for an error raised under its stream wrapper; a read that timed out
    is a timeout (not retried, reported as one), as for a request that never answered."""
    import httpx
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type

    if isinstance(exc, httpx.TimeoutException):
        return TimeoutError(str(exc) or "the model stopped sending")
    try:
        exception_type(  # type: ignore[no-untyped-call]
            model=getattr(stream, "model", None) or "",
            custom_llm_provider=getattr(stream, "custom_llm_provider", None),
            original_exception=exc,
            completion_kwargs={},
            extra_kwargs={},
        )
    except Exception as mapped:
        return mapped
    return exc  # pragma: no cover - exception_type always raises


async def _close(stream: Any) -> None:
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # already closed or broken: nothing is left open
        log.debug("closing an LLM stream failed", exc_info=True)


def model_reply(response: Any) -> ModelReply:
    """Plain values from a litellm `ModelResponse`; raises `ModelError` when it has no choices."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise ModelError(NO_CHOICES_ERROR)
    choice = choices[0]
    message = choice.message
    content = message.content
    return ModelReply(
        content=content if content is None or isinstance(content, str) else str(content),
        tool_calls=tuple(_tool_call(call) for call in (message.tool_calls or ())),
        finish_reason=str(choice.finish_reason) if choice.finish_reason is not None else None,
        usage=_usage(getattr(response, "usage", None)),
    )


def _tool_call(call: Any) -> ToolCall:
    function = call.function
    return ToolCall(
        id=str(call.id or ""),
        name=str(function.name or ""),
        arguments=_raw_arguments(function.arguments),
    )


def _raw_arguments(arguments: Any) -> str:
    # Kept verbatim, even invalid JSON: the tool step reports bad arguments back to the model.
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments)


def _usage(usage: Any) -> Usage:
    read, written = cache_tokens(usage)
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", None) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", None) or 0),
        cached_tokens=read,
        cache_write_tokens=written,
    )


__all__ = [
    "NO_CHOICES_ERROR",
    "LiteLLMClient",
    "cache_marks",
    "model_reply",
    "prepare_litellm",
    "price",
    "takes_schema",
]
