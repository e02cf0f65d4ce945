"""The API's response bodies: each is read from the client layer's view of the same name, field
for field (`Turn.model_validate(turn_view)`), so no converter restates a field; the fixed value
sets are `app.vocabulary`'s `Literal`s (the request bodies are `bodies.py`'s).

Responses are the views with times in ISO 8601 and usage grouped: a turn maps
onto an OpenAI Responses object (`id`, `status`, `error`, `usage`, background by default,
`starting_after` = an event seq) and a client tool's output onto `function_call_output`, without
another table.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.client.views import ConversationView
from app.vocabulary import (
    ActionKind,
    BodyFormat,
    ConversationStatus,
    DecisionWord,
    DeliveryStatus,
    Role,
    ToolChoice,
    TurnKind,
    TurnStatus,
)


class View(BaseModel):
    """A response body, read from a view's attributes (`model_validate(view)`); a field the view
    does not have takes its default."""

    model_config = ConfigDict(from_attributes=True)


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


class Action(View):
    call_id: str
    kind: ActionKind
    name: str
    arguments: dict[str, Any] = Field(description="for a clarification: question (and reason)")
    answered: bool | None = Field(description="it has its answer (an approval: its decision)")
    decision: DecisionWord | None = None
    reason: str | None = Field(None, description="why it is asked, when that is not obvious")


class Usage(View):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(
        description="US dollars of the model calls by litellm's prices; null when a call's "
        "price is unknown (a model litellm has no price for): unknown, not zero"
    )
    cached_tokens: int = Field(
        0,
        description="of prompt_tokens, those the provider read from its prompt cache (counted "
        "at the cached price in cost_usd)",
    )


class FileRef(View):
    """A file of a user message: its bytes at `GET /v1/files/{id}`."""

    id: uuid.UUID
    media_type: str = Field(description="read from its bytes")
    name: str | None
    size: int = Field(description="bytes")


class Message(View):
    seq: int
    role: Role
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    created_at: datetime
    usage: dict[str, Any] | None = Field(
        None,
        description="an assistant message's model call: the model that answered, "
        "prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, cost_usd",
    )
    parent_seq: int | None = Field(None, description="the message it follows; null: a first one")
    active: bool = Field(True, description="on the active path (what the model is sent)")
    siblings: list[int] = Field(
        default_factory=list,
        description="the seqs of every version at this point (its siblings and itself), in "
        "order: POST .../switch with one shows that version",
    )
    version: int = Field(1, description='its position among `siblings`, from 1 ("2 / 3")')
    version_count: int = Field(1, description="how many versions there are at this point")
    output: Any = Field(
        None,
        description="a structured answer's parsed object (its turn asked for an output_schema "
        "and it matched; an answer that did not has is_error)",
    )
    files: list[FileRef] = Field(
        default_factory=list,
        description="the files a user message carries (their bytes: GET /v1/files/{id})",
    )


class Turn(View):
    id: uuid.UUID
    object: Literal["turn"] = "turn"
    conversation_id: uuid.UUID
    number: int
    status: TurnStatus
    kind: TurnKind
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
    output_schema: dict[str, Any] | None = Field(
        None, description="what this message's answer must match (over the conversation's)"
    )
    model: str | None = Field(
        None,
        description="the fallback model the turn moved to (see the model.fallback event); "
        "null: the conversation's own",
    )


class Submission(View):
    """A submitted message: its turn (202, `Location` names it)."""

    turn: Turn
    repeated: bool = Field(description="the same Idempotency-Key and text came before: no write")
    enqueued: bool = Field(description="a worker was rung (else the recovery sweep starts it)")
    detail: str | None


class TurnResult(View):
    """`?wait=true`: the turn when it ended, with every message it committed."""

    turn: Turn
    finished: bool = Field(description="false: the wait ran out first; follow the turn")
    output_text: str | None = Field(description="the final answer's text, if it has one")
    output: Any = Field(
        None, description="the final answer's parsed object, when the turn asked for a schema"
    )
    messages: list[Message]


class Conversation(View):
    id: uuid.UUID
    object: Literal["conversation"] = "conversation"
    status: ConversationStatus
    error: str | None
    model: str
    instructions: str | None
    tools: list[str]
    tool_choice: ToolChoice
    forced_tool: str | None = Field(
        None, description="the one tool the model must call (with tool_choice required)"
    )
    context: dict[str, Any] | None
    client_tools: list[ClientTool] = Field(default_factory=list)
    approval_tools: list[str] = Field(
        default_factory=list, description="tools whose every call the user approves first"
    )
    clarify: bool = True
    context_policy: dict[str, Any] | None = Field(
        None, description="its own rules for what the model is sent as it grows"
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="the JSON Schema every final answer must match"
    )
    fallback_models: list[str] = Field(
        default_factory=list, description="the models a call falls back to, in order"
    )
    iterations: int
    turn_number: int = Field(description="the current (or last) turn's number; 0: none yet")
    usage: Usage
    created_at: datetime
    updated_at: datetime
    forked_from: uuid.UUID | None = Field(None, description="the conversation it was forked from")
    forked_at_seq: int | None = Field(None, description="the seq there of its last copied message")
    messages: list[Message] | None = Field(
        None,
        description="GET one conversation: the active path (after `after_seq`; every version's "
        "messages with `versions=all`)",
    )

    @classmethod
    def summary(cls, view: ConversationView) -> Conversation:
        """Lists and creation: the conversation without its transcript (`messages` null)."""
        return cls.model_validate(view).model_copy(update={"messages": None})


class ConversationList(View):
    data: list[Conversation]
    next_before: uuid.UUID | None = Field(description="pass as ?before= for the next page")


class Event(View):
    """A committed event: `seq` orders a conversation's events, gap-free; the SSE `id`."""

    seq: int
    type: str = Field(
        description="turn.*, message.committed, status.changed, action.required, "
        "context.compacted, branch.switched (`message_seq`: the active path's new leaf) or "
        "model.fallback (`data`: from, to, error: the turn moved to its next model)"
    )
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    created_at: datetime
    status: str | None = Field(None, description="status.changed: the new status")
    attempt: int | None = Field(None, description="turn.started / turn.resumed: the claim")
    message_seq: int | None = None
    message: Message | None = Field(None, description="message.committed: the message")
    turn: Turn | None = Field(None, description="turn.*: the turn as it is now")
    data: dict[str, Any] | None = Field(
        None,
        description="context.compacted: what the model is sent from now on, `kind` (elide: "
        "earlier turns' tool outputs sent as a reference; summary: messages from_seq.."
        "through_seq replaced by a summary), `reason` (threshold, overflow), `number`, "
        "`tokens_before`, `tokens_after`; model.fallback: `from`, `to` (models) and `error` "
        "(why the first failed)",
    )


class EventList(View):
    conversation_id: uuid.UUID
    data: list[Event]
    last_seq: int = Field(description="the conversation's last event when read")
    status: str = Field(description="the conversation's status when read")
    next_after: int | None = Field(description="pass as ?after= for the next page")


class FragmentOut(View):
    part: Literal["text", "call"]
    index: int = Field(description="the tool call's position in the reply (0 for text)")
    offset: int = Field(description="where `text` starts in its part")
    text: str
    call_id: str | None = None
    name: str | None = None


class DeltaOut(View):
    """SSE `message.delta`: the next piece of a reply that is not committed yet."""

    message_seq: int = Field(description="the seq the reply will be committed under")
    stream: str = Field(description="the model call attempt; a new one replaces the old")
    index: int = Field(description="0, 1, 2, ... within the stream")
    text: str = Field(description="the text this delta adds")
    fragments: list[FragmentOut]


class DiscardedOut(View):
    """SSE `message.discarded`: drop what was shown of this reply (it will not be committed)."""

    message_seq: int
    stream: str = Field(description="the attempt to drop, or * for every one of the message")
    reason: str


class Tool(View):
    name: str
    server: str
    description: str
    input_schema: dict[str, Any]


class ToolList(View):
    data: list[Tool]


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    live: str = Field(description="the live channel: Redis, or this process's hub")


# --- webhooks --------------------------------------------------------------------------------


class WebhookOut(View):
    id: uuid.UUID
    url: str
    conversation_id: uuid.UUID | None
    event_types: list[str]
    description: str | None
    created_at: datetime
    body_format: BodyFormat = "standard"
    secret: str | None = Field(
        None,
        description="only in the answer to its creation: the Standard Webhooks signing secret "
        "(whsec_...) that verifies each delivery; store it, it is not shown again",
    )


class WebhookList(View):
    data: list[WebhookOut]


class DeliveryOut(View):
    id: int
    message_id: str = Field(description="the `webhook-id` header: the same on every attempt")
    type: str
    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    event_seq: int
    status: DeliveryStatus = Field(
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


class DeliveryList(View):
    data: list[DeliveryOut]
