"""The LLM retry policy: which failures are transient, how long it waits, when it gives up, and
what the resulting `ModelError` says. No network, no litellm: failures are plain exceptions.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.worker.llm import call_with_retries, failure_message, is_transient, redact
from app.worker.ports import ModelError

REPO_ROOT = Path(__file__).resolve().parents[2]


class ProviderError(Exception):
    """Shaped like litellm's exceptions: a message and an HTTP `status_code`."""

    def __init__(self, status_code: int | None, message: str = "boom") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class RecordingSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def scripted(*outcomes: BaseException | str) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A call that raises or returns each outcome in turn, and the list counting its calls."""
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call, calls


def run_with_retries(call: Callable[[], Awaitable[str]], sleep: RecordingSleep) -> str:
    return asyncio.run(call_with_retries(call, sleep=sleep))


# --- is_transient ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (ProviderError(429, "Too many requests"), True),
        (ProviderError(503, "Service unavailable"), True),
        (ProviderError(500, "Overloaded"), True),
        (ProviderError(529, "overloaded_error"), True),
        (ProviderError(None, "Rate limit reached for gpt-4o"), True),
        (ProviderError(400, "rate_limit_exceeded"), True),
        (ProviderError(None, "ratelimit hit"), True),
        (ProviderError(400, "Invalid request"), False),
        (ProviderError(401, "Incorrect API key provided"), False),
        (ProviderError(500, "Internal server error"), False),
        (ProviderError(500, "generate failed"), False),
        (ProviderError(500, "an accurate, moderate answer"), False),
        (ProviderError(408, "Request timed out"), False),
        (ValueError("not a provider error"), False),
    ],
)
def test_is_transient_decides_from_status_and_text(exc: Exception, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_is_transient_trusts_the_status_code_not_the_exception_class() -> None:
    class BadRequestError(Exception):
        status_code = 503

    assert is_transient(BadRequestError("upstream unavailable"))


# --- call_with_retries ----------------------------------------------------------------------


def test_two_rate_limits_then_success_waits_3_then_6_seconds() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(ProviderError(429), ProviderError(429), "ok")

    assert run_with_retries(call, sleep) == "ok"
    assert sleep.waits == [3, 6]
    assert len(calls) == 3


def test_three_unavailable_errors_give_up_after_three_attempts() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(*[ProviderError(503, "Service Unavailable")] * 3)

    with pytest.raises(ModelError) as caught:
        run_with_retries(call, sleep)

    assert str(caught.value) == (
        "LLM call failed after 3 attempts (HTTP 503 ProviderError): Service Unavailable"
    )
    assert sleep.waits == [3, 6]
    assert len(calls) == 3


def test_a_bad_request_fails_at_once_without_waiting() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(ProviderError(400, "messages: field required"))

    with pytest.raises(ModelError) as caught:
        run_with_retries(call, sleep)

    assert str(caught.value) == "LLM call failed (HTTP 400 ProviderError): messages: field required"
    assert sleep.waits == []
    assert len(calls) == 1


def test_an_overloaded_server_error_is_retried_once_then_succeeds() -> None:
    sleep = RecordingSleep()
    call, _ = scripted(ProviderError(500, "Overloaded"), "ok")

    assert run_with_retries(call, sleep) == "ok"
    assert sleep.waits == [3]


def test_a_permanent_error_after_a_transient_one_counts_both_attempts() -> None:
    sleep = RecordingSleep()
    call, _ = scripted(ProviderError(429), ProviderError(400, "bad"))

    with pytest.raises(ModelError, match=r"^LLM call failed after 2 attempts \(HTTP 400"):
        run_with_retries(call, sleep)
    assert sleep.waits == [3]


def test_the_model_error_hides_the_original_exception() -> None:
    call, _ = scripted(ProviderError(401, "Incorrect API key provided: sk-abcdefgh12345678"))

    with pytest.raises(ModelError) as caught:
        run_with_retries(call, RecordingSleep())

    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert "sk-abcdefgh12345678" not in str(caught.value)


def test_each_retry_is_logged_with_its_attempt_and_a_redacted_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call, _ = scripted(ProviderError(429, "Rate limit for key sk-proj-secret123456"), "ok")

    with caplog.at_level(logging.WARNING, logger="app.worker.llm"):
        run_with_retries(call, RecordingSleep())

    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "attempt 1 of 3" in record.getMessage()
    assert "retrying in 3 s" in record.getMessage()
    assert "sk-proj-secret123456" not in record.getMessage()
    assert "[REDACTED]" in record.getMessage()


def test_cancellation_is_never_retried_nor_wrapped() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(asyncio.CancelledError())

    with pytest.raises(asyncio.CancelledError):
        run_with_retries(call, sleep)
    assert len(calls) == 1
    assert sleep.waits == []


# --- failure messages -----------------------------------------------------------------------


def test_a_timeout_says_how_long_the_request_was_given() -> None:
    assert failure_message(ProviderError(408), 1, timeout=120) == (
        "LLM request timed out after 120 s"
    )
    assert failure_message(TimeoutError(), 1, timeout=1.5) == "LLM request timed out after 1.5 s"


def test_litellm_prefixes_are_dropped_from_the_provider_message() -> None:
    exc = ProviderError(
        401,
        "litellm.AuthenticationError: AuthenticationError: OpenAIException - Invalid key",
    )

    assert failure_message(exc, 1) == "LLM call failed (HTTP 401 ProviderError): Invalid key"


@pytest.mark.parametrize(
    "raw",
    [
        # litellm's Anthropic handler passes the body on as the repr of its bytes
        'litellm.BadRequestError: AnthropicException - b\'{"type":"error","error":'
        '{"type":"invalid_request_error","message":"prompt is too long: 210000 '
        "tokens > 200000 maximum\"}}'",
        # and OpenAI's as text, with more after it
        'litellm.BadRequestError: OpenAIException - {"error": {"message": "prompt is too long: '
        '210000 tokens > 200000 maximum", "type": "invalid_request_error"}} (request id x)',
    ],
    ids=["anthropic bytes", "openai text"],
)
def test_a_provider_s_error_body_becomes_its_own_message(raw: str) -> None:
    assert failure_message(ProviderError(400, raw), 1) == (
        "LLM call failed (HTTP 400 ProviderError): prompt is too long: 210000 tokens > 200000 "
        "maximum"
    )


def test_an_error_without_status_names_its_type() -> None:
    assert failure_message(ValueError("odd"), 1) == "LLM call failed (ValueError): odd"


def test_a_multiline_message_becomes_one_line() -> None:
    message = failure_message(ProviderError(500, "first\n  second\nthird"), 1)

    assert message == "LLM call failed (HTTP 500 ProviderError): first second third"


# --- redact ---------------------------------------------------------------------------------


def test_redact_removes_given_secrets_env_credentials_and_key_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    monkeypatch.setenv("DB_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("SHORT_KEY", "abc")  # too short to be worth redacting
    text = (
        "given=configured-key-xyz env=tok-0123456789 pw=hunter2hunter2 "
        "openai=sk-proj-AbC_dEf-123456 auth=Bearer eyJhbGciOi.x.y short=abc"
    )

    redacted = redact(text, ["configured-key-xyz"])

    assert redacted == (
        "given=[REDACTED] env=[REDACTED] pw=[REDACTED] openai=[REDACTED] auth=[REDACTED] short=abc"
    )


def test_redact_caps_the_length() -> None:
    assert len(redact("x" * 5000, [])) <= 500


def test_importing_the_adapter_does_not_import_litellm() -> None:
    # litellm costs ~2 s to import; the worker imports it on its first model call only. A fresh
    # interpreter, because other tests of this run may have imported litellm already.
    code = "import sys, app.worker.llm; print('litellm' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "False"


# --- Retry-After --------------------------------------------------------------------------------


class WaitAsked(ProviderError):
    """A provider error whose response carried headers, where litellm keeps them."""

    def __init__(
        self, status_code: int, headers: dict[str, str], message: str = "Rate limit reached"
    ) -> None:
        super().__init__(status_code, message)
        self.litellm_response_headers = headers


@pytest.mark.parametrize(
    ("headers", "waits"),
    [
        ({"Retry-After": "10"}, [10.0]),  # longer than the step: the provider's wait
        ({"retry-after": "1"}, [3.0]),  # shorter: the step
        ({"retry-after-ms": "4500", "retry-after": "9"}, [4.5]),  # the finer one first
        ({"Retry-After": "soon"}, [3.0]),  # unreadable: the step
        ({"Retry-After": "60"}, [60.0]),  # at the cap: still honoured
    ],
)
def test_a_retry_waits_the_longer_of_the_step_and_the_provider_s_retry_after(
    headers: dict[str, str], waits: list[float]
) -> None:
    sleep = RecordingSleep()
    call, calls = scripted(WaitAsked(429, headers), "ok")
    assert run_with_retries(call, sleep) == "ok"
    assert sleep.waits == waits and len(calls) == 2


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from app.worker.llm import retry_after

    now = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    asked = WaitAsked(503, {"Retry-After": format_datetime(now + timedelta(seconds=20), True)})
    assert retry_after(asked, now=now) == 20.0
    past = WaitAsked(503, {"Retry-After": format_datetime(now - timedelta(seconds=20), True)})
    assert retry_after(past, now=now) == 0.0


def test_a_wait_beyond_the_cap_fails_at_once_with_the_provider_s_wait_in_the_error() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(WaitAsked(429, {"Retry-After": "120"}), "never")
    with pytest.raises(ModelError) as caught:
        asyncio.run(call_with_retries(call, sleep=sleep, max_retry_after=60))
    assert len(calls) == 1 and sleep.waits == []
    assert str(caught.value) == (
        "LLM call failed (HTTP 429 WaitAsked): Rate limit reached; the provider asked to wait "
        "120 s before retrying, more than the 60 s this worker waits "
        "(CHATWORKER_LLM_MAX_RETRY_AFTER_SECONDS)"
    )


def test_still_three_attempts_in_all_when_the_provider_asks_for_waits() -> None:
    sleep = RecordingSleep()
    asked = WaitAsked(503, {"Retry-After": "8"})
    call, calls = scripted(asked, asked, asked, "never")
    with pytest.raises(ModelError) as caught:
        asyncio.run(call_with_retries(call, sleep=sleep))
    assert len(calls) == 3 and sleep.waits == [8.0, 8.0]
    assert "after 3 attempts" in str(caught.value)


def test_a_retry_after_on_an_error_that_is_not_transient_changes_nothing() -> None:
    sleep = RecordingSleep()
    call, calls = scripted(WaitAsked(400, {"Retry-After": "5"}, "Bad request"), "never")
    with pytest.raises(ModelError):
        asyncio.run(call_with_retries(call, sleep=sleep))
    assert len(calls) == 1 and sleep.waits == []
