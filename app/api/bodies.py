"""The API's request bodies: each refuses unknown fields (a typo is an error, not a silent
default); their fixed value sets are `app.vocabulary`'s `Literal`s, and a client tool's shape
(`ClientTool`) is the one both directions share."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field

from app.api.schemas import Body, ClientTool
from app.vocabulary import (
    BodyFormat,
    BranchBusyPolicy,
    BusyPolicy,
    ToolChoice,
    WebhookEventType,
    busy_policies_said,
)


class ActionOutput(Body):
    call_id: str = Field(description="the waiting call's id (`actions[].call_id` of the turn)")
    output: str = Field(description="a client tool's output, or the answer to a clarification")


class ActionApproval(Body):
    call_id: str = Field(description="the waiting call's id (`actions[].call_id` of the turn)")
    approve: bool = Field(
        strict=True, description="true runs the call; false tells the model it was denied"
    )
    reason: str | None = Field(None, description="why (the model reads it with a denial)")


class ActionsSubmit(Body):
    outputs: list[ActionOutput | ActionApproval] = Field(
        min_length=1, description="one per answered call: an output, or an approval"
    )


class ConversationCreate(Body):
    id: uuid.UUID | None = Field(
        None,
        description="choose the id (a retried create then returns the same conversation); "
        "omitted: a new one",
    )
    model: str | None = Field(None, description="a litellm model string; default: the server's")
    instructions: str | None = Field(None, description="the system prompt")
    tools: list[str] = Field(default_factory=list, description="tool names from GET /v1/tools")
    tool_choice: ToolChoice | dict[str, Any] = Field(
        "auto",
        description='auto, none, required, or the one tool the model must call: {"type": '
        '"function", "name": ...} (or Chat Completions\' {"type": "function", "function": '
        '{"name": ...}}); a forced choice binds each turn\'s first model call',
    )
    context: dict[str, Any] | None = Field(
        None, description="your own data, stored and returned untouched"
    )
    client_tools: list[ClientTool] | None = Field(
        None,
        description="tools your client executes: a call of one pauses the turn "
        "(requires_action) until you POST its output to /v1/turns/{id}/actions",
    )
    clarify: bool = Field(
        True,
        description="the model may ask the user a question (agent_clarify) when it has tools; "
        "the next message (or an action output) answers it",
    )
    approval_tools: list[str] | None = Field(
        None,
        description="tools (of `tools`) whose every call waits for the user's approval, beyond "
        "what each MCP server's own policy asks",
    )
    context_policy: dict[str, Any] | None = Field(
        None,
        description="this conversation's own rules for what the model is sent as it grows, "
        "over the server's settings: `window` (tokens), `threshold` (0.1-1), `reply_tokens`, "
        "`compaction` (bool), `summary_model`, `prompt_cache` (bool)",
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description='what every final answer must match: `{"name": ..., "schema": a JSON Schema '
        'of an object, "strict": false}`; checked before each turn completes (one repair is '
        "asked for), the parsed object in the answer's `output`; a message may ask for its own",
    )
    fallback_models: list[str] | None = Field(
        None,
        description="models a call moves to, in order, when the one in use is down or its "
        "transient errors spent their retries (unset: `CHATWORKER_FALLBACK_MODELS`)",
    )


MAX_SEQ = 2**31 - 1  # a message's seq is a 32-bit column


class FileIn(Body):
    name: str | None = Field(None, description="its file name (no path)")
    media_type: str | None = Field(
        None,
        description="image/png, image/jpeg, image/gif, image/webp, application/pdf, "
        "text/plain, text/markdown, text/csv, application/json; checked against its bytes",
    )
    data: str = Field(description="its bytes in base64, or a data: URL")


class MessageCreate(Body):
    text: str = Field(description="the user's message")
    files: list[FileIn] | None = Field(
        None,
        description="files beside the text (images, PDFs, text files), each within "
        "`CHATWORKER_MAX_FILE_BYTES`, of a kind the conversation's model takes",
    )
    on_busy: BusyPolicy = Field("reject", description=busy_policies_said())
    output_schema: dict[str, Any] | None = Field(
        None,
        description="this message's answer must match this JSON Schema, over the "
        'conversation\'s: `{"name": ..., "schema": {"type": "object", ...}, "strict": false}`',
    )


class MessageEdit(Body):
    text: str = Field(description="the new version of the user's message")
    on_busy: BranchBusyPolicy = Field(
        "reject", description="while a turn runs (an edit cannot steer it)"
    )


class Regenerate(Body):
    seq: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQ,
        description="the answer to regenerate (or any message after the user message it "
        "answers); omitted: the last one",
    )
    on_busy: BranchBusyPolicy = Field(
        "reject", description="while a turn runs (a regenerate cannot steer it)"
    )


class BranchSwitch(Body):
    seq: int = Field(
        ge=1,
        le=MAX_SEQ,
        description="a message of the version to show (a `siblings` seq): the path goes to the "
        "newest message under it",
    )


class Fork(Body):
    seq: int | None = Field(
        None, ge=1, le=MAX_SEQ, description="the last message to copy; omitted: the whole path"
    )
    id: uuid.UUID | None = Field(None, description="choose the new conversation's id")


class WebhookCreate(Body):
    url: str = Field(description="where to POST (http or https)", max_length=2000)
    conversation_id: uuid.UUID | None = Field(
        None, description="only this conversation (yours); omitted: every one of yours"
    )
    event_types: list[WebhookEventType] | None = Field(
        None, description="what to be told of; omitted: all four", min_length=1
    )
    description: str | None = Field(None, max_length=500)
    body_format: BodyFormat = Field(
        "standard",
        description="the bodies' shape: ours, or OpenAI's webhook events (response.completed, "
        "... naming the /v1/responses response; the openai SDK's webhooks.unwrap verifies them)",
    )


__all__ = [
    "ActionApproval",
    "ActionOutput",
    "ActionsSubmit",
    "BranchSwitch",
    "ConversationCreate",
    "Fork",
    "MessageCreate",
    "MessageEdit",
    "Regenerate",
    "WebhookCreate",
]
