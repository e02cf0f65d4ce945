"""What the web-app client returns: a conversation with its new messages, a turn, a page of
events, a submit, a tool, an API key, a budget, a webhook and its deliveries.

Frozen dataclasses with no I/O; the store (`store/`) builds them from rows, the clients hand them
to the caller.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.models import ASSISTANT, CLARIFY_TOOL, FAILED, FINISHED_TURN_STATUSES, IDLE
from app.vocabulary import (
    ActionKind,
    BudgetPeriod,
    ConversationStatus,
    DecisionWord,
    DeliveryStatus,
    Role,
    ToolChoice,
    TurnKind,
    TurnStatus,
)


@dataclass(frozen=True)
class UsageView:
    """Tokens and cost of a turn's or a conversation's model calls."""

    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # litellm's prices; None: a call's price was unknown
    cached_tokens: int = 0  # of the prompt tokens, read from the provider's prompt cache

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: Role
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    created_at: datetime
    # How a reply was streamed: {"attempt", "text": each live delta's length} (None: it was not)
    reply_stream: dict[str, Any] | None = None
    # What the model call that wrote it used (an assistant message's): prompt, completion,
    # cached and cache-write tokens, cost_usd
    usage: dict[str, Any] | None = None
    # Its place in the tree: the message it follows (None: a first message), whether it is on
    # the active path, and every version at this point (its siblings and itself, in order).
    parent_seq: int | None = None
    active: bool = True
    siblings: list[int] = field(default_factory=list)
    # A structured answer's parsed object (its turn asked for a JSON Schema, and it matched).
    # An answer that did not match has `is_error` (the model was asked to repair it once).
    output: Any = None
    # The files a user message carries: {"id", "media_type", "name", "size"} each (the bytes:
    # `ChatClient.get_file`, `GET /v1/files/{id}`).
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> int:
        """Its position among its versions, from 1 (a chat page's "2 / 3")."""
        return self.siblings.index(self.seq) + 1 if self.seq in self.siblings else 1

    @property
    def version_count(self) -> int:
        return max(len(self.siblings), 1)


@dataclass(frozen=True)
class ConversationView:
    """A conversation's state, how it was set up, and the messages after the caller's cursor."""

    id: uuid.UUID
    owner: str | None
    status: ConversationStatus
    error: str | None
    model: str
    instructions: str | None
    tools: list[str]
    tool_choice: ToolChoice
    context: dict[str, Any] | None
    iterations: int
    prompt_tokens: int
    completion_tokens: int
    turn_number: int  # the current (or last) turn's number; 0 before the first message
    created_at: datetime
    updated_at: datetime
    messages: list[MessageView] = field(default_factory=list)
    client_tools: list[dict[str, Any]] = field(default_factory=list)  # executed by the client
    approval_tools: list[str] = field(default_factory=list)  # every call approved first
    clarify: bool = True  # the model may ask the user (agent_clarify)
    context_policy: dict[str, Any] | None = None  # its own context rules (over the settings)
    output_schema: dict[str, Any] | None = None  # what every final answer must match
    fallback_models: list[str] = field(default_factory=list)  # (empty: the settings')
    forced_tool: str | None = None  # the one tool the model must call (`tool_choice` required)
    cost_usd: float | None = 0.0  # litellm's prices; None: a call's price was unknown
    cached_tokens: int = 0  # of the prompt tokens, read from the provider's prompt cache
    forked_from: uuid.UUID | None = None  # the conversation it was forked from
    forked_at_seq: int | None = None  # the seq there of the last message it copied

    @property
    def is_running(self) -> bool:
        return self.status not in (IDLE, FAILED)

    @property
    def client_answered(self) -> frozenset[str]:
        """The tools the client answers: its own, and the model's question when it may ask."""
        names = {str(tool["name"]) for tool in self.client_tools}
        if self.clarify:
            names.add(CLARIFY_TOOL)
        return frozenset(names)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def usage(self) -> UsageView:
        return UsageView(
            self.prompt_tokens, self.completion_tokens, self.cost_usd, self.cached_tokens
        )

    def cursor(self, previous: int | None = None) -> int | None:
        """The `after_seq` for the next poll."""
        return self.messages[-1].seq if self.messages else previous


@dataclass(frozen=True)
class Decision:
    """The user's decision on a call that waits for approval, and why (told to the model)."""

    approve: bool
    reason: str | None = None


@dataclass(frozen=True)
class ActionView:
    """Something a turn waits for (or waited for): a question the model asked the user
    (`clarification`: `arguments["question"]`), or a call of a tool the client executes
    (`client_tool`, with its arguments). `answered`: the call has its result (None: not read)."""

    call_id: str
    kind: ActionKind
    name: str
    arguments: dict[str, Any]
    answered: bool | None = None
    decision: DecisionWord | None = None  # an approval's
    reason: str | None = None  # why it is asked, when not obvious (a call in flight at a crash)


@dataclass(frozen=True)
class TurnView:
    """A turn: one user message (or a retry) to its end."""

    id: uuid.UUID
    conversation_id: uuid.UUID
    number: int
    status: TurnStatus
    kind: TurnKind
    message_seq: int | None  # the user's message, once it is in the transcript
    idempotency_key: str | None
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    actions: tuple[ActionView, ...] = ()  # what it waits for while `requires_action`
    cost_usd: float | None = 0.0  # litellm's prices; None: a call's price was unknown
    metadata: dict[str, str] | None = None  # the caller's, given with its message
    cached_tokens: int = 0  # of the prompt tokens, read from the provider's prompt cache
    output_schema: dict[str, Any] | None = None  # what this message's answer must match
    model: str | None = None  # the model it moved to (a fallback); None: the conversation's
    # What the dialect that submitted it shows back of its request (`submit_message`'s `echo`)
    echo: dict[str, Any] | None = None

    @property
    def pending_actions(self) -> tuple[ActionView, ...]:
        """The actions still waiting for an answer."""
        return tuple(action for action in self.actions if action.answered is False)

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_TURN_STATUSES

    @property
    def usage(self) -> UsageView:
        return UsageView(
            self.prompt_tokens, self.completion_tokens, self.cost_usd, self.cached_tokens
        )


@dataclass(frozen=True)
class EventView:
    """A committed event, with the rows it names: the message of `message.committed`, the turn
    of `turn.*` (as it is now: a finished turn no longer changes)."""

    seq: int
    type: str
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    created_at: datetime
    status: str | None = None  # status.changed
    attempt: int | None = None  # turn.started / turn.resumed
    message_seq: int | None = None  # message.committed: the message's seq
    message: MessageView | None = None  # message.committed
    turn: TurnView | None = None  # turn.*
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class EventPage:
    """Committed events after a cursor, in order; `last_seq` is the conversation's last event,
    so `next_after < last_seq` means more are already committed."""

    conversation_id: uuid.UUID
    events: list[EventView]
    last_seq: int
    status: str
    last_message_seq: int = 0  # the conversation's last message when the page was read

    @property
    def next_after(self) -> int | None:
        """The cursor for the next page (None if this one is empty)."""
        return self.events[-1].seq if self.events else None


@dataclass(frozen=True)
class Submitted:
    """A message was stored as turn `turn_id`; `enqueued` is False when no doorbell was rung (no
    queue configured, the queue unreachable, or the turn waits behind another): `detail` says
    why. Nothing is lost either way: a worker's recovery sweep starts the turn.

    `repeated`: the same idempotency key and text were submitted before; this is that turn, and
    nothing was written."""

    conversation_id: uuid.UUID
    seq: int | None  # the user message's seq (None while the turn waits outside the transcript)
    enqueued: bool
    detail: str | None = None
    turn_id: uuid.UUID | None = None
    turn_status: str = "queued"
    repeated: bool = False
    turn: TurnView | None = None  # the turn as the command left it (read in its transaction)


@dataclass(frozen=True)
class ConversationPage:
    """A page of conversations, newest first; `next_before` fetches the next (None: the last)."""

    conversations: list[ConversationView]
    next_before: uuid.UUID | None


@dataclass(frozen=True)
class StoredFile:
    """A message's file as stored: the media type read from its bytes, its name, its bytes."""

    media_type: str
    name: str | None
    data: bytes


@dataclass(frozen=True)
class FinishedTurn:
    """A turn after waiting for it, with the messages it committed (`finished` False: the wait
    ran out first and it is still going)."""

    turn: TurnView
    messages: list[MessageView]
    finished: bool

    @property
    def output_text(self) -> str | None:
        """The final answer's text: the last assistant message without tool calls, once the
        turn ended (None while it runs, or when it ended without one)."""
        if not self.finished:
            return None
        answer = self._answer()
        return None if answer is None else answer.content

    @property
    def output(self) -> Any:
        """The final answer's parsed object, when the turn asked for a JSON Schema (None
        otherwise, and while it runs)."""
        answer = self._answer()
        return None if answer is None else answer.output

    def _answer(self) -> MessageView | None:
        if not self.finished:
            return None
        answers = [m for m in self.messages if m.role == ASSISTANT and not m.tool_calls]
        return answers[-1] if answers else None


@dataclass(frozen=True)
class TurnRecord:
    """A turn with its conversation's setup (no messages) and every event it committed (each
    `message.committed` with its message), read in one transaction."""

    turn: TurnView
    conversation: ConversationView
    events: list[EventView]


@dataclass(frozen=True)
class AuditView:
    """An entry of the audit log: an operator's action."""

    id: int
    at: datetime
    operator: str
    action: str
    target: str
    selected: int  # how many runs it acted on
    detail: dict[str, Any]


@dataclass(frozen=True)
class ApiKeyView:
    """An API key as listed: never its secret."""

    id: uuid.UUID
    owner: str  # an operator's key: the operator's name
    name: str
    created_at: datetime
    revoked_at: datetime | None
    operator: bool = False


@dataclass(frozen=True)
class ToolInfo:
    name: str
    server: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class BudgetView:
    owner: str | None
    conversation_id: uuid.UUID | None
    period: BudgetPeriod  # day: the UTC day
    max_tokens: int | None
    max_cost_usd: float | None
    created_at: datetime


@dataclass(frozen=True)
class WebhookView:
    id: uuid.UUID
    owner: str | None
    conversation_id: uuid.UUID | None  # None: every conversation of the owner
    url: str
    event_types: tuple[str, ...]
    description: str | None
    created_at: datetime
    secret: str | None = None  # only when it was just made: store it, it is not shown again
    body_format: str = "standard"  # ours, or "openai" (OpenAI's webhook events)


@dataclass(frozen=True)
class DeliveryView:
    id: int
    webhook_id: uuid.UUID
    message_id: str  # the `webhook-id` header: the same on every attempt
    type: str
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    event_seq: int
    status: DeliveryStatus  # failed: gave up
    attempts: int
    next_attempt_at: datetime | None  # pending only
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
