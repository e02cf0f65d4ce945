"""The one LLM retry policy: 3 attempts in total, only for transient errors (HTTP 429 or 503, a
rate limit, an overload), waiting 3 s then 6 s, or longer when the provider says so.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from app.worker.context import window_in
from app.worker.llm.error_text import failure_message, redact, short_reason, status_code
from app.worker.ports import ContextOverflow, ModelError

# The package's name, as before it was a package: operators filter the retry warnings by it.
log = logging.getLogger("app.worker.llm")

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
# What a provider (or litellm's ContextWindowExceededError) says of a request too long for the
# model's window: OpenAI's code and wording, Anthropic's, and the usual gateways'.
OVERFLOW_TEXT = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long|context window|"
    r"too many (input )?tokens|input is too long",
    re.IGNORECASE,
)


def is_overflow(exc: BaseException) -> bool:
    """Whether the provider refused the request as too long for the model: never transient
    (the same request fails the same way), but the turn can compact and try again."""
    if any(cls.__name__ == "ContextWindowExceededError" for cls in type(exc).__mro__):
        return True
    return OVERFLOW_TEXT.search(str(exc)) is not None


def is_transient(exc: BaseException) -> bool:
    """Whether a failed LLM call is worth another attempt: HTTP 429/503, rate limits, overload.

    Decided from the status code and the text, never from the exception class: litellm picks
    some classes from the message wording (a 401 can arrive as a BadRequestError).
    """
    if is_overflow(exc):
        return False
    if status_code(exc) in TRANSIENT_STATUSES:
        return True
    return TRANSIENT_TEXT.search(str(exc)) is not None


# A provider that did not answer at all, or failed on its side: another model may (plan row 30).
_UNAVAILABLE_CLASSES = frozenset(
    {
        "APIConnectionError",
        "Timeout",
        "TimeoutError",
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "RemoteProtocolError",
        "ServiceUnavailableError",
        "InternalServerError",
    }
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether the provider was down: no connection, a timeout, or a 5xx of its own. Such a
    call (like a transient one whose retries are spent) may fall back to another model."""
    status = status_code(exc)
    if status is not None and status >= 500:
        return True
    if status is not None and 400 <= status < 500:
        return False
    return any(cls.__name__ in _UNAVAILABLE_CLASSES for cls in type(exc).__mro__)


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
        why, wait = _log_retry(state, hidden)
        if on_retry is not None:
            exc = state.outcome.exception() if state.outcome is not None else None
            on_retry(why, wait, retry_cause(exc) if exc is not None else "other")

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
            f"the {max_retry_after:g} s this worker waits (CHATWORKER_LLM_MAX_RETRY_AFTER_SECONDS)",
            may_fall_back=True,
        ) from None
    except Exception as exc:
        text = failure_message(exc, attempts, timeout=timeout, secrets=hidden)
        if is_overflow(exc):
            raise ContextOverflow(text, window_in(str(exc))) from None
        down = is_transient(exc) or is_unavailable(exc)
        raise ModelError(text, may_fall_back=down) from None
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def retry_cause(exc: BaseException) -> str:
    """Why a transient error was transient, in a word (a metric's label): its status code, or
    the word of its text that made it so ("rate", "overloaded")."""
    status = status_code(exc)
    if status in TRANSIENT_STATUSES:
        return str(status)
    found = TRANSIENT_TEXT.search(str(exc))
    return found.group(0).lower() if found else "other"


def _log_retry(state: RetryCallState, secrets: tuple[str, ...]) -> tuple[str, float]:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    reason = redact(short_reason(exc), secrets) if exc is not None else "unknown error"
    log.warning(
        "LLM call attempt %d of %d failed (%s); retrying in %g s",
        state.attempt_number,
        MAX_ATTEMPTS,
        reason,
        wait,
    )
    return reason, wait


__all__ = [
    "MAX_ATTEMPTS",
    "MAX_RETRY_AFTER_SECONDS",
    "OnRetry",
    "Sleep",
    "call_with_retries",
    "is_overflow",
    "is_transient",
    "retry_after",
    "retry_cause",
]
