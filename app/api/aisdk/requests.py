"""`POST /v1/ai-sdk/chat` read into what it asks of us, or refused with a clear 400. Pure.

`useChat` posts the whole chat as the browser holds it; only its last message is taken (the
client's copy of the history is never trusted: the transcript is ours):

    the last message                      taken as
    ------------------------------------  ------------------------------------------------------
    role user, text parts                 the user's message: a new turn; its `file` parts
                                          (data: URLs) its files
    role assistant (the turn's message),  the answers to what its turn waits for: a client
    tool parts `output-available` /       tool's output (an error's text), the decision on an
    `output-error` / `approval-responded` approval (with its reason); parts of calls the turn
                                          does not wait for are the client's copy and ignored,
                                          but an approval for a call that waits for none is
                                          refused (a forged approval)

    field                                 taken as
    ------------------------------------  ------------------------------------------------------
    id                                    the chat: our conversation id, or any other string
                                          (useChat's own ids), which names a conversation of
                                          the caller's own (created at its first message)
    trigger                               submit-message; regenerate-message (useChat's
                                          `regenerate()`): a new answer to the last user message
                                          of the list it sends (a regenerate of that message of
                                          ours: the k-th user message of the active path)
    messageId                             the message answered (an assistant message); with
                                          submit-message and a user message: an edit
                                          (`sendMessage({text, messageId})`) of that message, the
                                          list's k-th user message: the k-th of the active path
    model, instructions, tools,           the chat's setup when it is created (the `body`
    clientTools, approvalTools, clarify,  option of useChat); later, when given, the same.
    outputSchema, fallbackModels          `outputSchema` ({"name", "schema", "strict"}): every
                                          answer is checked against it, its parsed object
                                          streamed as a `data-output` part
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.api.aisdk.chunks import approval_id
from app.client.views import ActionView, Decision
from app.errors import InvalidRequest
from app.models import APPROVAL

#: The namespace of the conversations named by a chat id that is not one of ours.
CHAT_CONVERSATIONS = uuid.UUID("0b7e4f7c-3c1d-4a8e-9f52-6a1d2c3b4e5f")
MAX_CHAT_ID = 200
ANSWER_STATES = ("output-available", "output-error", "approval-responded")
SETUP = (
    "model",
    "instructions",
    "tools",
    "clientTools",
    "approvalTools",
    "clarify",
    "outputSchema",
    "fallbackModels",
)


@dataclass(frozen=True)
class ToolPart:
    """A tool part of the client's assistant message, in a state that answers something."""

    call_id: str
    name: str
    state: str
    output: Any = None
    error_text: str | None = None
    approval: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChatRequest:
    chat_id: str
    message_id: str  # the last message's
    text: str | None  # a user's message
    parts: tuple[ToolPart, ...]  # an assistant message's answers
    setup: Mapping[str, Any]  # the setup fields given
    # An edit (of `text`) or a regenerate: of the k-th user message of the chat (from 1)
    branch: str | None = None  # "edit" | "regenerate"
    user_index: int = 0
    files: tuple[dict[str, Any], ...] = ()  # a user's message's `file` parts


def parse_chat(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object (useChat's: id, messages, trigger)")
    chat_id = check_chat_id(body.get("id"))
    trigger = body.get("trigger", "submit-message")
    if trigger not in ("submit-message", "regenerate-message"):
        raise InvalidRequest(
            f"trigger must be 'submit-message' or 'regenerate-message', not {trigger!r}"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list (useChat's UI messages)")
    last = messages[-1]
    if not isinstance(last, dict) or not isinstance(last.get("parts"), list):
        raise InvalidRequest("the last message must be an object with a list of parts")
    message_id = last.get("id")
    if not isinstance(message_id, str) or not message_id:
        raise InvalidRequest("the last message needs its id (a string)")
    edited = body.get("messageId")
    role = last.get("role")
    setup = {name: body[name] for name in SETUP if name in body}
    asked = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")
    if trigger == "regenerate-message":
        if role != "user":
            raise InvalidRequest(
                "regenerate-message: the list must end with the user message to answer again"
            )
        return ChatRequest(chat_id, message_id, None, (), setup, "regenerate", asked)
    if role == "user":
        files: list[dict[str, Any]] = []
        text = _text(last["parts"], files)
        if edited is not None and edited == message_id:  # sendMessage({text, messageId})
            if files:
                raise InvalidRequest("an edited message carries no file parts (send text)")
            return ChatRequest(chat_id, message_id, text, (), setup, "edit", asked)
        return ChatRequest(chat_id, message_id, text, (), setup, files=tuple(files))
    if role == "assistant":
        parts = tuple(_answers(last["parts"]))
        if not parts:
            raise InvalidRequest(
                "the last message is the assistant's and answers nothing (no tool part is "
                f"in a state of {', '.join(ANSWER_STATES)})"
            )
        return ChatRequest(chat_id, message_id, None, parts, setup)
    raise InvalidRequest(f"the last message's role must be user or assistant, not {role!r}")


def check_chat_id(chat_id: Any) -> str:
    if not isinstance(chat_id, str) or not chat_id.strip():
        raise InvalidRequest("id (the chat's) must be a non-empty string")
    if len(chat_id) > MAX_CHAT_ID or not chat_id.isprintable():
        raise InvalidRequest(f"id (the chat's) must be printable, at most {MAX_CHAT_ID} characters")
    return chat_id


def conversation_of(owner: str | None, chat_id: str) -> uuid.UUID:
    """Our conversation id, or the conversation a chat id names for this owner."""
    try:
        return uuid.UUID(chat_id)
    except ValueError:
        return uuid.uuid5(CHAT_CONVERSATIONS, f"{owner or ''}\x00{chat_id}")


def _text(parts: list[Any], files: list[dict[str, Any]]) -> str:
    texts: list[str] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest("a text part's text must be a string")
            texts.append(text)
        elif kind == "file":
            files.append(_file(part))
        elif kind in ("step-start",) or (isinstance(kind, str) and kind.startswith("data-")):
            continue
        else:
            raise InvalidRequest(f"a user message's part of type {kind!r} is not supported")
    text = "\n\n".join(texts)
    if not text.strip() and not files:
        raise InvalidRequest("the user's message has no text")
    return text


def _file(part: dict[str, Any]) -> dict[str, Any]:
    """A `file` part (`sendMessage({text, files})`: `url` a data: URL, `mediaType`, `filename`)
    as one of the message's files; a URL elsewhere is refused (this server fetches nothing)."""
    url, media_type, name = part.get("url"), part.get("mediaType"), part.get("filename")
    if not isinstance(url, str) or not url.startswith("data:"):
        raise InvalidRequest(
            "a file part's url must be a data: URL holding the file (useChat's sendMessage "
            "with files sends one; this server fetches nothing)"
        )
    found: dict[str, Any] = {"data": url}
    if isinstance(media_type, str):
        found["media_type"] = media_type
    if isinstance(name, str):
        found["name"] = name
    return found


def _answers(parts: list[Any]) -> list[ToolPart]:
    found: list[ToolPart] = []
    for part in parts:
        if not isinstance(part, dict):
            raise InvalidRequest("each part must be an object")
        kind = part.get("type")
        if not isinstance(kind, str) or not (kind.startswith("tool-") or kind == "dynamic-tool"):
            continue
        state = part.get("state")
        if state not in ANSWER_STATES:
            continue
        call_id = part.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(f"a {kind} part needs its toolCallId")
        name = part.get("toolName") if kind == "dynamic-tool" else kind[len("tool-") :]
        approval = part.get("approval")
        if state == "approval-responded" and not (
            isinstance(approval, dict) and isinstance(approval.get("approved"), bool)
        ):
            raise InvalidRequest(
                f"call {call_id}: an approval-responded part needs approval.approved"
            )
        error_text = part.get("errorText")
        found.append(
            ToolPart(
                call_id,
                str(name),
                state,
                part.get("output"),
                error_text if isinstance(error_text, str) else None,
                approval if isinstance(approval, dict) else None,
            )
        )
    return found


def answers(
    parts: Sequence[ToolPart], waiting: Sequence[ActionView]
) -> tuple[dict[str, str], dict[str, Decision]]:
    """The answers the client's parts give to what the turn waits for (`waiting`: its actions
    not answered yet). An approval for a call that waits for none, or an output for a call
    waiting for an approval: InvalidRequest; nothing answered at all: InvalidRequest."""
    kinds = {action.call_id: action.kind for action in waiting}
    outputs: dict[str, str] = {}
    approvals: dict[str, Decision] = {}
    for part in parts:
        kind = kinds.get(part.call_id)
        if part.state == "approval-responded":
            if kind != APPROVAL:
                raise InvalidRequest(
                    f"call {part.call_id} waits for no approval (an approval for it is refused)"
                )
            assert part.approval is not None
            if part.approval.get("id") != approval_id(part.call_id):
                raise InvalidRequest(
                    f"call {part.call_id}: approval id {part.approval.get('id')!r} is not the "
                    f"one asked ({approval_id(part.call_id)!r})"
                )
            reason = part.approval.get("reason")
            approvals[part.call_id] = Decision(
                bool(part.approval["approved"]), reason if isinstance(reason, str) else None
            )
            continue
        if kind is None:
            continue  # a call answered before: the client's copy
        if kind == APPROVAL:
            raise InvalidRequest(f"call {part.call_id} waits for an approval, not an output")
        if part.state == "output-error":
            outputs[part.call_id] = f"Error: {part.error_text or 'the client tool failed'}"
        else:
            output = part.output
            outputs[part.call_id] = output if isinstance(output, str) else json.dumps(output)
    if not outputs and not approvals:
        names = ", ".join(a.call_id for a in waiting) or "nothing"
        raise InvalidRequest(f"the message answers none of the calls the chat waits for ({names})")
    return outputs, approvals


__all__ = ["ChatRequest", "ToolPart", "answers", "check_chat_id", "conversation_of", "parse_chat"]
