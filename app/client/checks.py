"""Validation of what a web app passes in, before anything touches the database.

Pure functions: each bad input raises an `InvalidRequest` subclass whose message names the problem.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from app.client.commands import BUSY_POLICIES
from app.errors import (
    ConversationNotFound,
    InvalidCursor,
    InvalidMessage,
    InvalidRequest,
    MessageTooLarge,
    TurnNotFound,
    UnknownTool,
)
from app.models import MAX_IDEMPOTENCY_KEY_CHARS, TOOL_CHOICES

MAX_MODEL_CHARS = 200
MAX_PAGE = 1000


def parse_conversation_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, ConversationNotFound, "conversation")


def parse_turn_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    return _parse_id(value, TurnNotFound, "turn")


def _parse_id(value: uuid.UUID | str, not_found: type[InvalidRequest], noun: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise not_found(f"no {noun} {value!r} (not a valid id)") from None


def check_model(model: Any) -> str:
    """The model string, stripped."""
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"model must be a non-empty string of at most {MAX_MODEL_CHARS}")
    return model.strip()


def check_tool_choice(tool_choice: Any) -> None:
    if tool_choice not in TOOL_CHOICES:
        raise InvalidRequest(f"tool_choice must be one of {', '.join(TOOL_CHOICES)}")


def check_tool_names(tools: Sequence[str], tool_choice: str) -> list[str]:
    """The tool names without duplicates, in order; 'required' needs at least one."""
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
        raise InvalidRequest("tools must be a list of tool names")
    names = list(dict.fromkeys(tools))
    if tool_choice == "required" and not names:
        raise InvalidRequest("tool_choice 'required' needs at least one tool")
    return names


def check_text(text: Any, what: str, limit: int, *, allow_empty: bool = False) -> None:
    """A storable string of at most `limit` characters (`what` names it in the message)."""
    if not isinstance(text, str):
        raise InvalidMessage(f"{what} must be a string, not {type(text).__name__}")
    if not allow_empty and not text.strip():
        raise InvalidMessage(f"{what} is empty")
    if len(text) > limit:
        raise MessageTooLarge(f"{what} is {len(text)} characters; the limit is {limit}")
    if "\x00" in text:
        raise InvalidMessage(f"{what} contains a NUL character, which cannot be stored")


def check_context(context: Any) -> None:
    """None, or a dict that serializes to JSON."""
    if context is None:
        return
    if not isinstance(context, dict):
        raise InvalidRequest("context must be a JSON object (a dict) or None")
    try:
        json.dumps(context)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"context must be JSON-serializable: {exc}") from None


def check_tools_offered(names: Sequence[str], offered: Collection[str]) -> None:
    """Every name is in the published catalogue `offered`; the error says what exists."""
    missing = [name for name in names if name not in offered]
    if not missing:
        return
    if not offered:
        raise UnknownTool(
            f"unknown tool(s): {', '.join(missing)}; no worker has published its tools yet "
            "(start one with `chatworker worker`, or run `chatworker tools --refresh`)"
        )
    raise UnknownTool(
        f"unknown tool(s): {', '.join(missing)}; available: {', '.join(sorted(offered))}"
    )


def check_idempotency_key(key: Any) -> str | None:
    """None, or 1 to 200 printable characters."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidRequest(
            f"idempotency_key must be a string of 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )
    if not key.isprintable():
        raise InvalidRequest("idempotency_key must be printable (no control characters)")
    return key


def check_busy_policy(on_busy: Any) -> str:
    if on_busy not in BUSY_POLICIES:
        raise InvalidRequest(f"on_busy must be one of {', '.join(BUSY_POLICIES)}, not {on_busy!r}")
    return str(on_busy)


def check_cursor(after: Any, limit: Any) -> tuple[int, int]:
    """An event cursor (0 = from the start) and a page size of 1 to 1000."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidCursor(f"after must be an event seq >= 0, not {after!r}")
    return after, check_page_size(limit)


def check_page_size(limit: Any) -> int:
    """A page size of 1 to 1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}, not {limit!r}")
    return limit
