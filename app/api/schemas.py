"""The API's response bodies, and how each is built from the client layer's views; the fixed
value sets both directions share (the request bodies are `bodies.py`'s).

Responses are the views, field for field, with times in ISO 8601 and usage grouped: a turn maps
onto an OpenAI Responses object (`id`, `status`, `error`, `usage`, background by default,
`starting_after` = an event seq) and a client tool's output onto `function_call_output`, without
another table.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.client.views import (
    ActionView,
    ConversationView,
    DeliveryView,
    EventView,
    FinishedTurn,
    MessageView,
    Submitted,
    ToolInfo,
    TurnView,
    WebhookView,
)
from app.live import Delta, Discarded

BusyPolicy = Literal["reject", "enqueue", "interrupt"]
ToolChoice = Literal["auto", "none", "required"]


class Body(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class ClientTool(Body):
    name: str = Field(description="letters, digits, _ or -; not a server tool's or a built-in's")
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="a JSON Schema of the arguments (an object)",
    )


class Action(BaseModel):
    call_id: str
    kind: Literal["clarification", "client_tool", "approval"]
    name: str
    arguments: dict[str, Any] = Field(description="for a clarification: question (and reason)")
    answered: bool | None = Field(description="it has its answer (an approval: its decision)")
    decision: Literal["approved", "denied"] | None = None
    reason: str | None = Field(None, description="why it is asked, when that is not obvious")

    @classmethod
    def of(cls, view: ActionView) -> Action:
        return cls(**view.__dict__)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(
        description="US dollars of the model calls by litellm's prices; null when a call's "
        "price is unknown (a model litellm has no price for): unknown, not zero"
    )


class Message(BaseModel):
    seq: int
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    created_at: datetime

    @classmethod
    def of(cls, view: MessageView) -> Message:
        return cls(**view.__dict__)


class Turn(BaseModel):
    id: uuid.UUID
    object: Literal["turn"] = "turn"
    conversation_id: uuid.UUID
    number: int
    status: Literal["queued", "running", "requires_action", "completed", "failed", "cancelled"]
    kind: Literal["message", "retry"]
    message_seq: int | None = Field(description="the user's message, once in the transcript")
    idempotency_key: str | None
    error: str | None
    usage: Usage
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    actions: list[Action] = Field(
        default_factory=list,
        description="what the turn waits for while requires_action (answered: has its output)",
    )

    @classmethod
    def of(cls, view: TurnView) -> Turn:
        return cls(
            id=view.id,
            conversation_id=view.conversation_id,
            number=view.number,
            status=view.status,  # type: ignore[arg-type]
            kind=view.kind,  # type: ignore[arg-type]
            message_seq=view.message_seq,
            idempotency_key=view.idempotency_key,
            error=view.error,
            usage=_usage(view.prompt_tokens, view.completion_tokens, view.cost_usd),
            created_at=view.created_at,
            started_at=view.started_at,
            finished_at=view.finished_at,
            cancel_requested_at=view.cancel_requested_at,
            actions=[Action.of(action) for action in view.actions],
        )


class Submission(BaseModel):
    """A submitted message: its turn (202, `Location` names it)."""

    turn: Turn
    repeated: bool = Field(description="the same Idempotency-Key and text came before: no write")
    enqueued: bool = Field(description="a worker was rung (else the recovery sweep starts it)")
    detail: str | None

    @classmethod
    def of(cls, submitted: Submitted, turn: TurnView) -> Submission:
        return cls(
            turn=Turn.of(turn),
            repeated=submitted.repeated,
            enqueued=submitted.enqueued,
            detail=submitted.detail,
        )


class TurnResult(BaseModel):
    """`?wait=true`: the turn when it ended, with every message it committed."""

    turn: Turn
    finished: bool = Field(description="false: the wait ran out first; follow the turn")
    output_text: str | None = Field(description="the final answer's text, if it has one")
    messages: list[Message]

    @classmethod
    def of(cls, result: FinishedTurn) -> TurnResult:
        answers = [m for m in result.messages if m.role == "assistant" and not m.tool_calls]
        return cls(
            turn=Turn.of(result.turn),
            finished=result.finished,
            output_text=answers[-1].content if answers and result.finished else None,
            messages=[Message.of(m) for m in result.messages],
        )


class Conversation(BaseModel):
    id: uuid.UUID
    object: Literal["conversation"] = "conversation"
    status: Literal["idle", "processing", "tool_loop", "failed"]
    error: str | None
    model: str
    instructions: str | None
    tools: list[str]
    tool_choice: ToolChoice
    context: dict[str, Any] | None
    client_tools: list[ClientTool] = Field(default_factory=list)
    clarify: bool = True
    iterations: int
    turn_number: int = Field(description="the current (or last) turn's number; 0: none yet")
    usage: Usage
    created_at: datetime
    updated_at: datetime
    messages: list[Message] | None = Field(
        None, description="GET one conversation: the transcript (after `after_seq`)"
    )

    @classmethod
    def of(cls, view: ConversationView, *, messages: bool) -> Conversation:
        return cls(
            id=view.id,
            status=view.status,  # type: ignore[arg-type]
            error=view.error,
            model=view.model,
            instructions=view.instructions,
            tools=view.tools,
            tool_choice=view.tool_choice,  # type: ignore[arg-type]
            context=view.context,
            client_tools=[ClientTool(**tool) for tool in view.client_tools],
            clarify=view.clarify,
            iterations=view.iterations,
            turn_number=view.turn_number,
            usage=_usage(view.prompt_tokens, view.completion_tokens, view.cost_usd),
            created_at=view.created_at,
            updated_at=view.updated_at,
            messages=[Message.of(m) for m in view.messages] if messages else None,
        )


class ConversationList(BaseModel):
    data: list[Conversation]
    next_before: uuid.UUID | None = Field(description="pass as ?before= for the next page")


class Event(BaseModel):
    """A committed event: `seq` orders a conversation's events, gap-free; the SSE `id`."""

    seq: int
    type: str = Field(description="turn.*, message.committed or status.changed")
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    created_at: datetime
    status: str | None = Field(None, description="status.changed: the new status")
    attempt: int | None = Field(None, description="turn.started / turn.resumed: the claim")
    message_seq: int | None = None
    message: Message | None = Field(None, description="message.committed: the message")
    turn: Turn | None = Field(None, description="turn.*: the turn as it is now")

    @classmethod
    def of(cls, view: EventView) -> Event:
        return cls(
            seq=view.seq,
            type=view.type,
            conversation_id=view.conversation_id,
            turn_id=view.turn_id,
            created_at=view.created_at,
            status=view.status,
            attempt=view.attempt,
            message_seq=view.message_seq,
            message=None if view.message is None else Message.of(view.message),
            turn=None if view.turn is None else Turn.of(view.turn),
        )


class EventList(BaseModel):
    conversation_id: uuid.UUID
    data: list[Event]
    last_seq: int = Field(description="the conversation's last event when read")
    status: str = Field(description="the conversation's status when read")
    next_after: int | None = Field(description="pass as ?after= for the next page")


class FragmentOut(BaseModel):
    part: Literal["text", "call"]
    index: int = Field(description="the tool call's position in the reply (0 for text)")
    offset: int = Field(description="where `text` starts in its part")
    text: str
    call_id: str | None = None
    name: str | None = None


class DeltaOut(BaseModel):
    """SSE `message.delta`: the next piece of a reply that is not committed yet."""

    message_seq: int = Field(description="the seq the reply will be committed under")
    stream: str = Field(description="the model call attempt; a new one replaces the old")
    index: int = Field(description="0, 1, 2, ... within the stream")
    text: str = Field(description="the text this delta adds")
    fragments: list[FragmentOut]

    @classmethod
    def of(cls, delta: Delta) -> DeltaOut:
        return cls(
            message_seq=delta.message_seq,
            stream=delta.stream,
            index=delta.index,
            text=delta.text,
            fragments=[FragmentOut(**f.__dict__) for f in delta.fragments],
        )


class DiscardedOut(BaseModel):
    """SSE `message.discarded`: drop what was shown of this reply (it will not be committed)."""

    message_seq: int
    stream: str = Field(description="the attempt to drop, or * for every one of the message")
    reason: str

    @classmethod
    def of(cls, discarded: Discarded) -> DiscardedOut:
        return cls(**discarded.__dict__)


class Tool(BaseModel):
    name: str
    server: str
    description: str
    input_schema: dict[str, Any]

    @classmethod
    def of(cls, info: ToolInfo) -> Tool:
        return cls(**info.__dict__)


class ToolList(BaseModel):
    data: list[Tool]


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    live: str = Field(description="the live channel: Redis, or this process's hub")


def _usage(prompt: int, completion: int, cost: float | None) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cost_usd=cost,
    )


# --- webhooks --------------------------------------------------------------------------------

WebhookEventType = Literal[
    "turn.completed", "turn.failed", "turn.cancelled", "turn.requires_action"
]


class WebhookOut(BaseModel):
    id: uuid.UUID
    url: str
    conversation_id: uuid.UUID | None
    event_types: list[str]
    description: str | None
    created_at: datetime
    secret: str | None = Field(
        None,
        description="only in the answer to its creation: the Standard Webhooks signing secret "
        "(whsec_...) that verifies each delivery; store it, it is not shown again",
    )

    @classmethod
    def of(cls, view: WebhookView) -> WebhookOut:
        return cls(
            id=view.id,
            url=view.url,
            conversation_id=view.conversation_id,
            event_types=list(view.event_types),
            description=view.description,
            created_at=view.created_at,
            secret=view.secret,
        )


class WebhookList(BaseModel):
    data: list[WebhookOut]


class DeliveryOut(BaseModel):
    id: int
    message_id: str = Field(description="the `webhook-id` header: the same on every attempt")
    type: str
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    event_seq: int
    status: Literal["pending", "delivered", "failed"] = Field(
        description="failed: every attempt of the schedule failed; it is not sent again "
        "unless you ask (POST .../redeliver)"
    )
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None = Field(description="the receiver's last answer (None: none)")
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, view: DeliveryView) -> DeliveryOut:
        return cls(**{name: getattr(view, name) for name in cls.model_fields})


class DeliveryList(BaseModel):
    data: list[DeliveryOut]
