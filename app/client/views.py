"""What the web-app client returns: a conversation with its new messages, a submit, a tool.

Frozen dataclasses with no I/O; `reads` builds them from rows, the facade hands them to the caller.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.models import FAILED, IDLE


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    created_at: datetime


@dataclass(frozen=True)
class ConversationView:
    """A conversation's state, how it was set up, and the messages after the caller's cursor."""

    id: uuid.UUID
    status: str
    error: str | None
    model: str
    instructions: str | None
    tools: list[str]
    tool_choice: str
    context: dict[str, Any] | None
    iterations: int
    prompt_tokens: int
    completion_tokens: int
    updated_at: datetime
    messages: list[MessageView] = field(default_factory=list)

    @property
    def is_running(self) -> bool:
        return self.status not in (IDLE, FAILED)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def cursor(self, previous: int | None = None) -> int | None:
        """The `after_seq` for the next poll."""
        return self.messages[-1].seq if self.messages else previous


@dataclass(frozen=True)
class Submitted:
    """A message was stored; `enqueued` is False when no doorbell was rung (no queue configured,
    or the queue was unreachable): `detail` says why. Nothing is lost either way: a worker's
    recovery sweep starts the turn."""

    conversation_id: uuid.UUID
    seq: int
    enqueued: bool
    detail: str | None = None


@dataclass(frozen=True)
class ToolInfo:
    name: str
    server: str
    description: str
    input_schema: dict[str, Any]
