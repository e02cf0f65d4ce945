"""The error text of a failed model call: one readable line (what failed, after how many
attempts, why, in the provider's own words) that never holds a credential.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

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


def failure_message(
    exc: BaseException, attempts: int, *, timeout: float | None = None, secrets: Iterable[str] = ()
) -> str:
    """One line for the conversation's error: what failed, after how many attempts, and why."""
    if status_code(exc) == 408 or isinstance(exc, TimeoutError):
        text = "LLM request timed out" + (f" after {timeout:g} s" if timeout is not None else "")
    else:
        after = f" after {attempts} attempts" if attempts > 1 else ""
        detail = _provider_message(exc)
        text = f"LLM call failed{after} ({_kind(exc)})" + (f": {detail}" if detail else "")
    return redact(text, secrets)


def short_reason(exc: BaseException) -> str:
    detail = _provider_message(exc)
    return f"{_kind(exc)}: {detail}" if detail else _kind(exc)


def _kind(exc: BaseException) -> str:
    status = status_code(exc)
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
        # the first JSON value: litellm may wrap the body (the repr of its bytes: b'{...}')
        body, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return text
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else text


def status_code(exc: BaseException) -> int | None:
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


__all__ = ["failure_message", "redact", "short_reason", "status_code"]
