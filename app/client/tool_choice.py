"""OpenAI's `tool_choice` read into how a conversation keeps it: its mode (`tool_choice`, the
closed set `auto | none | required`) and the one tool it forces (`forced_tool`). Pure: every
dialect and the conversation's setup read it here, so each shape means the same everywhere.

    OpenAI's value                                             kept as (tool_choice, forced_tool)
    ---------------------------------------------------------  ---------------------------------
    "auto", "none", "required"                                 (that word, None)
    {"type": "auto" | "none" | "required"}                     (that word, None)
    {"type": "function", "name": N}            (Responses)     ("required", N)
    {"type": "function", "function": {"name": N}}  (Chat       ("required", N)
                                                   Completions)

`required` needs a tool, and a forced tool must be one of the conversation's (a server's tool it
allows, or a client tool); anything else raises `InvalidToolChoice` (an `InvalidRequest` whose
`param` is `tool_choice`: each API's error names it). A forced
choice binds the first model call of a turn only (`app/worker/offer.py` says why).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequest
from app.vocabulary import TOOL_CHOICES

REQUIRED = "required"
#: A tool's name as OpenAI takes it (at most 64 characters); the column holds it.
MAX_NAME_CHARS = 64


class InvalidToolChoice(InvalidRequest):
    """A `tool_choice` that cannot be kept."""

    param = "tool_choice"


@dataclass(frozen=True)
class ToolChoice:
    """How a conversation chooses tools: `mode` one of `TOOL_CHOICES`; `forced` the tool it
    must call (with `required` only)."""

    mode: str = "auto"
    forced: str | None = None

    @property
    def columns(self) -> dict[str, Any]:
        return {"tool_choice": self.mode, "forced_tool": self.forced}

    def responses_shape(self) -> str | dict[str, str]:
        """As OpenAI's Responses API shows it: the word, or the object naming the function."""
        if self.forced is None:
            return self.mode
        return {"type": "function", "name": self.forced}


def read_tool_choice(value: Any, tools: Collection[str]) -> ToolChoice:
    """`value` (a string or an object, either dialect's shape) checked against the names of the
    conversation's `tools`; `InvalidToolChoice` when it cannot be kept."""
    if value is None:
        return ToolChoice()
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "function":
            choice = ToolChoice(REQUIRED, _function_name(value))
        elif kind in TOOL_CHOICES and set(value) == {"type"}:
            choice = ToolChoice(str(kind))
        else:
            raise InvalidToolChoice(
                f"tool_choice of type {kind!r} is not supported: give auto, none, required or "
                '{"type": "function", "name": ...}'
            )
    elif isinstance(value, str) and value in TOOL_CHOICES:
        choice = ToolChoice(value)
    else:
        raise InvalidToolChoice(
            f"tool_choice must be one of {', '.join(TOOL_CHOICES)}, or an object naming a "
            'function ({"type": "function", "name": ...})'
        )
    if choice.mode == REQUIRED and not tools:
        raise InvalidToolChoice(
            "tool_choice 'required' needs at least one tool (of a server, or a client tool)"
        )
    if choice.forced is not None and choice.forced not in tools:
        offered = ", ".join(sorted(tools))
        raise InvalidToolChoice(
            f"tool_choice names {choice.forced!r}, which is not one of the tools given ({offered})"
        )
    return choice


def _function_name(value: dict[str, Any]) -> str:
    """The name of `{"type": "function", "name"}` or `{"type": "function", "function":
    {"name"}}` (one of the two, not both)."""
    nested = value.get("function")
    if nested is not None and "name" in value:
        raise InvalidToolChoice(
            'tool_choice: give the function\'s name once, as "name" (Responses) or '
            '"function": {"name"} (Chat Completions)'
        )
    name = nested.get("name") if isinstance(nested, dict) else value.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidToolChoice('tool_choice of type "function" needs the function\'s name')
    if len(name) > MAX_NAME_CHARS:
        raise InvalidToolChoice(f"tool_choice: a function's name is at most {MAX_NAME_CHARS} chars")
    return name


__all__ = ["InvalidToolChoice", "ToolChoice", "read_tool_choice"]
