"""Validation of what a web app passes in, before anything touches the database.

Pure functions: each bad input raises an `InvalidRequest` subclass whose message names the problem.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from app.errors import (
    ConversationNotFound,
    InvalidMessage,
    InvalidRequest,
    UnknownTool,
)
from app.models import TOOL_CHOICES

MAX_MODEL_CHARS = 200


def parse_conversation_id(value: uuid.UUID | str) -> uuid.UUID:
    """The id as a UUID; a malformed one is reported as not found, like an unknown one."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ConversationNotFound(f"no conversation {value!r} (not a valid id)") from None


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
        raise InvalidMessage(f"{what} is {len(text)} characters; the limit is {limit}")
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
