"""The model adapter: one chat-completions call through litellm, under the one LLM retry policy,
streamed by default so the reply reaches the live channel as it forms (`reply.ReplyAssembler`).
Failures become a `ModelError` whose one-line message is readable and never holds a credential.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from app.demo.model import DEMO_PROVIDER, demo_handler
from app.telemetry import logs, metrics
from app.worker.plan import ToolCall
from app.worker.ports import NO_SINK, ModelError, ModelReply, ModelRequest, ReplySink, Usage
from app.worker.reply import ReplyAssembler

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
# (why the attempt failed, seconds until the next, its cause in brief: 429, 503, rate, ...)
OnRetry = Callable[[str, float, str], None]

MAX_ATTEMPTS = 3
RETRY_STEP_SECONDS = 3  # the linear wait: 3 s, then 6 s
MAX_RETRY_AFTER_SECONDS = 60.0  # the longest Retry-After honoured (a setting)
TRANSIENT_STATUSES = frozenset({429, 503})
# "rate" must start a word: "Rate limit", "rate_limit_exceeded" and "ratelimit" are transient,
# but a plain substring test would also retry "generate failed", "accurate" or "moderate".
TRANSIENT_TEXT = re.compile(r"\brate|overloaded", re.IGNORECASE)
NO_CHOICES_ERROR = "The model returned no choices"

REDACTED = "[REDACTED]"
MAX_MESSAGE_CHARS = 500
SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD")
MIN_ENV_SECRET_CHARS = 8
MIN_GIVEN_SECRET_CHARS = 4
SECRET_PATTERNS = (re.compile(r"sk-[A-Za-z0-9_\-]{8,}"), re.compile(r"Bearer\s+\S+"))
# litellm prefixes its messages with "litellm.RateLimitError: RateLimitError: OpenAIException - ".
LITELLM_PREFIX = re.compile(
    r"^litellm\.\w+:\s+(?:\w+(?:Error|Exception):\s+)?(?:\w+Exception\s+-\s+)?"
)


# --- litellm, imported lazily -----------------------------------------------------------------


def prepare_litellm() -> None:
    """Import and configure litellm once, and register the offline demo provider.

    The environment must be set before the first import: without it, importing litellm fetches
    the model cost map over the network and runs `load_dotenv()` on the working directory, and
    the cheaper route below is not taken. Each variable can be set otherwise beforehand.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    # litellm's own HTTP handler for `openai/` instead of the OpenAI SDK, whose request transform
    # grows with the history (measured: 5.4 against 21 ms of CPU a call at 100 messages); and no
    # base64 scan of every message for the logs nobody reads.
    os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")
    os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
    with logs.unified("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        import litellm

    litellm.suppress_debug_info = True
    if not any(item["provider"] == DEMO_PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append(
            {"provider": DEMO_PROVIDER, "custom_handler": demo_handler()}
        )


# --- the retry policy -------------------------------------------------------------------------


def is_transient(exc: BaseException) -> bool:
    """Whether a failed LLM call is worth another attempt: HTTP 429/503, rate limits, overload.

    Decided from the status code and the text, never from the exception class: litellm picks
    some classes from the message wording (a 401 can arrive as a BadRequestError).
    """
    if _status_code(exc) in TRANSIENT_STATUSES:
        return True
    return TRANSIENT_TEXT.search(str(exc)) is not None


def retry_after(exc: BaseException, now: datetime | None = None) -> float | None:
    """The wait the provider asked for with this error, in seconds: its `retry-after-ms` or
    `Retry-After` header (seconds, or an HTTP date); None when it asked for none."""
    headers = _response_headers(exc)
    if "retry-after-ms" in headers:
        milliseconds = _number(headers["retry-after-ms"])
        if milliseconds is not None:
            return milliseconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _response_headers(exc: BaseException) -> dict[str, str]:
    """The headers of the HTTP response behind a litellm error, names in lower case."""
    headers = getattr(exc, "litellm_response_headers", None)
    if not headers:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        return {str(name).lower(): str(value) for name, value in dict(headers or {}).items()}
    except (TypeError, ValueError):
        return {}


def _number(text: str) -> float | None:
    try:
        return max(0.0, float(text))
    except ValueError:
        return None


class _TooLongAWait(Exception):
    """The provider asked for a longer wait than the cap: the turn fails at once, saying so."""

    def __init__(self, cause: BaseException, wait: float) -> None:
        super().__init__(str(cause))
        self.cause, self.wait = cause, wait


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    sleep: Sleep = asyncio.sleep,
    timeout: float | None = None,
    secrets: Iterable[str] = (),
    on_retry: OnRetry | None = None,
    max_retry_after: float = MAX_RETRY_AFTER_SECONDS,
) -> T:
    """Await `call()` under the policy: 3 attempts, transient errors only, waiting 3 s then 6 s,
    or longer when the provider says so (`Retry-After`), up to `max_retry_after`: a provider
    that asks for more fails the call at once, its wait in the error.

    Raises `ModelError` (chained from None, so no traceback carries the original text) once the
    policy gives up; `timeout` only words the message of a timed-out call. `on_retry` hears of
    each retry before its wait (a streamed reply's readers drop what they were shown).
    """
    hidden = tuple(secrets)
    attempts = 0

    async def asked() -> T:
        try:
            return await call()
        except Exception as exc:
            wait = retry_after(exc) if is_transient(exc) else None
            if wait is not None and wait > max_retry_after and attempts < MAX_ATTEMPTS:
                raise _TooLongAWait(exc, wait) from exc
            raise

    def wait(state: RetryCallState) -> float:
        step = float(RETRY_STEP_SECONDS * state.attempt_number)  # 3 s, then 6 s
        exc = state.outcome.exception() if state.outcome is not None else None
        wanted = retry_after(exc) if exc is not None else None
        return max(step, wanted or 0.0)

    def before_sleep(state: RetryCallState) -> None:
        reason, wait = _log_retry(state, hidden)
        if on_retry is not None:
            exc = state.outcome.exception() if state.outcome is not None else None
            on_retry(reason, wait, retry_cause(exc) if exc is not None else "other")

    retrying = AsyncRetrying(
        stop=stop_after_attempt(MAX_ATTEMPTS),
        wait=wait,
        retry=retry_if_exception(
            lambda exc: is_transient(exc) and not isinstance(exc, _TooLongAWait)
        ),
        reraise=True,
        sleep=sleep,
        before_sleep=before_sleep,
    )
    try:
        async for attempt in retrying:
            with attempt:
                attempts = attempt.retry_state.attempt_number
                return await asked()
    except ModelError:  # already readable and final (a reply with no choices)
        raise
    except _TooLongAWait as exc:
        text = failure_message(exc.cause, attempts, timeout=timeout, secrets=hidden)
        raise ModelError(
            f"{text}; the provider asked to wait {exc.wait:g} s before retrying, more than "
            f"the {max_retry_after:g} s this worker waits (CHATWORKER_LLM_MAX_RETRY_AFTER_SECONDS)"
        ) from None
    except Exception as exc:
        raise ModelError(failure_message(exc, attempts, timeout=timeout, secrets=hidden)) from None
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def retry_cause(exc: BaseException) -> str:
    """Why a transient error was transient, in a word (a metric's label): its status code, or
    the word of its text that made it so ("rate", "overloaded")."""
    status = _status_code(exc)
    if status in TRANSIENT_STATUSES:
        return str(status)
    found = TRANSIENT_TEXT.search(str(exc))
    return found.group(0).lower() if found else "other"


def _log_retry(state: RetryCallState, secrets: tuple[str, ...]) -> tuple[str, float]:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    reason = redact(_reason(exc), secrets) if exc is not None else "unknown error"
    log.warning(
        "LLM call attempt %d of %d failed (%s); retrying in %g s",
        state.attempt_number,
        MAX_ATTEMPTS,
        reason,
        wait,
    )
    return reason, wait


# --- readable, credential-free failures -------------------------------------------------------


def failure_message(
    exc: BaseException, attempts: int, *, timeout: float | None = None, secrets: Iterable[str] = ()
) -> str:
    """One line for the conversation's error: what failed, after how many attempts, and why."""
    if _status_code(exc) == 408 or isinstance(exc, TimeoutError):
        text = "LLM request timed out" + (f" after {timeout:g} s" if timeout is not None else "")
    else:
        after = f" after {attempts} attempts" if attempts > 1 else ""
        detail = _provider_message(exc)
        text = f"LLM call failed{after} ({_kind(exc)})" + (f": {detail}" if detail else "")
    return redact(text, secrets)


def _reason(exc: BaseException) -> str:
    detail = _provider_message(exc)
    return f"{_kind(exc)}: {detail}" if detail else _kind(exc)


def _kind(exc: BaseException) -> str:
    status = _status_code(exc)
    return type(exc).__name__ if status is None else f"HTTP {status} {type(exc).__name__}"


def _provider_message(exc: BaseException) -> str:
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    return _error_body_message(LITELLM_PREFIX.sub("", text, count=1))


def _error_body_message(text: str) -> str:
    """A provider's JSON error body (litellm's own HTTP handlers pass it on whole) as its
    message: `{"error": {"message": "..."}}` (OpenAI) or `{"type": "error", "error": {...}}`
    (Anthropic); anything else as it is."""
    start = text.find("{")
    if start < 0:
        return text
    try:
        body = json.loads(text[start:])
    except ValueError:
        return text
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else text


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` without credentials, capped at about 500 characters.

    Removed: the given secrets, the value of every environment variable named like a credential
    (KEY, TOKEN, SECRET, PASSWORD; values of 8 characters or more), `sk-...` keys and bearer tokens.
    """
    given = [s for s in secrets if s and len(s) >= MIN_GIVEN_SECRET_CHARS]
    from_env = [
        value
        for name, value in os.environ.items()
        if SECRET_ENV_NAME.search(name.upper()) and len(value) >= MIN_ENV_SECRET_CHARS
    ]
    # Longest first, so a secret that contains another is removed whole.
    for secret in sorted({*given, *from_env}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(REDACTED, text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


# --- the client -------------------------------------------------------------------------------


class LiteLLMClient:
    """`ModelClient` over `litellm.acompletion`: any litellm model string, plus `demo/...`.

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
    ) -> None:
        self.timeout = timeout
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
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            timed.observe(request.model, outcome)
        usage = reply.usage
        cost = price(request.model, usage.prompt_tokens, usage.completion_tokens)
        metrics.MODEL_TOKENS.labels(request.model, "prompt").inc(usage.prompt_tokens)
        metrics.MODEL_TOKENS.labels(request.model, "completion").inc(usage.completion_tokens)
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
            # The policy above is the only retry: the OpenAI SDK underneath would retry twice more.
            "max_retries": 0,
        }
        if self.api_base:
            options["api_base"] = self.api_base
        if self._api_key:
            options["api_key"] = self._api_key
        return options


STREAMED = {"stream": True, "stream_options": {"include_usage": True}}

_UNPRICED: set[str] = set()  # models litellm has no price for (asked once per process)


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What a call cost in US dollars by litellm's price data (bundled with it: no network);
    None when the model has no known price, never a guess of zero."""
    if model in _UNPRICED:
        return None
    import litellm

    try:
        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
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
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", None) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", None) or 0),
    )


__all__ = [
    "MAX_ATTEMPTS",
    "NO_CHOICES_ERROR",
    "LiteLLMClient",
    "call_with_retries",
    "failure_message",
    "is_transient",
    "model_reply",
    "prepare_litellm",
    "price",
    "redact",
    "retry_after",
    "retry_cause",
]
