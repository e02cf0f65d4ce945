"""A Chat Completions request's `messages` read into what it asks of us. Pure.

Chat Completions is stateless: every request holds the whole conversation, and the assistant's
messages come back without ids. So a request is placed by its history:

    the messages end with                 read as
    ------------------------------------  ---------------------------------------------------
    user message(s)                       a new turn: their text (and files). It continues the
                                          conversation whose turn answered the history before
                                          them, found by digest (`previous`), or starts one
    tool messages, after an assistant     the answers to that message's calls (every one of
    message with tool_calls               them): they continue the turn that made the calls,
                                          found by a call id
    an assistant message                  refused: there is nothing to answer

**Digests.** `digest(setup, messages[:n])` names a history: the setup (model, instructions,
tools, tool_choice) and each message reduced to what the model is sent (role, text, files by
hash, call ids, a tool's output). A turn is submitted with the digest of the history through
its user message as its idempotency key (`turn_key`), in the conversation whose id is made from
the digest of the history through the user message of its first turn here (`candidates`): so
the same request finds the same turn, and a later request finds the turn its last assistant
message answered by the digest of the history before it, among the few conversations its
history could have started. Nothing but the caller's own conversations is searched (the owner is
in the id).

A history that cannot be placed (written elsewhere, or changed since we answered it) is copied
into a new conversation (`earlier`): its turns are messages there, not turns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from app.api.chat.messages import ChatMessage, read_messages
from app.api.responses.errors import Unsupported


@dataclass(frozen=True)
class ChatHistory:
    instructions: str | None
    earlier: tuple[ChatMessage, ...]  # the conversation before the new turn (or the answers)
    text: str | None = None  # the new user message(s), joined
    files: tuple[dict[str, Any], ...] = ()
    outputs: dict[str, str] = field(default_factory=dict)  # tool messages: call id -> output
    answered: ChatMessage | None = None  # the assistant message whose calls `outputs` answer
    boundaries: tuple[int, ...] = ()  # len(earlier[:b]) right after each earlier user group
    last_reply: ChatMessage | None = None  # the assistant message before the new user message

    def digest(self, setup: dict[str, Any], upto: int | None = None) -> str:
        """The history through `earlier[:upto]` (None: all of it and the new user message)."""
        reduced: list[Any] = [setup, *_reduced(self.earlier[:upto])]
        if upto is None:
            reduced.append({"role": "user", "text": self.text, "files": _hashes(self.files)})
        text = json.dumps(reduced, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def previous(self) -> int | None:
        """Where the history the last reply answered ends (its user message's boundary)."""
        if self.last_reply is None:
            return None
        return self.boundaries[-1] if self.boundaries else None


def read_history(value: Any) -> ChatHistory:
    """`messages` read; a 400 naming `messages[i]` for what cannot be taken."""
    messages = read_messages(value)
    instructions: list[str] = []
    start = 0
    while start < len(messages) and messages[start].role in ("system", "developer"):
        instructions.append(messages[start].text)
        start += 1
    said = "\n\n".join(instructions) if instructions else None
    body = messages[start:]
    for message in body:
        if message.role in ("system", "developer"):
            raise Unsupported(
                f"{message.where}: a {message.role} message after the conversation began is not "
                "taken (give the instructions first)",
                param="messages",
            )
    if not body:
        raise Unsupported("messages hold no user message", param="messages")
    if body[0].role != "user":
        raise Unsupported(
            f"{body[0].where}: the conversation must begin with a user message", param="messages"
        )
    _check_calls(body)
    last = body[-1]
    if last.role == "assistant":
        raise Unsupported(
            f"{last.where}: the last message is the assistant's, so there is nothing to answer "
            "(end with a user message, or with tool messages answering its calls)",
            param="messages",
        )
    if last.role == "tool":
        return _answers(said, body)
    new = len(body)
    while new > 0 and body[new - 1].role == "user":
        new -= 1
    earlier = tuple(body[:new])
    group = body[new:]
    files = tuple(file for message in group for file in message.files)
    return ChatHistory(
        said,
        earlier,
        text="\n\n".join(message.text for message in group if message.text),
        files=files,
        boundaries=_boundaries(earlier),
        last_reply=earlier[-1] if earlier else None,
    )


def _answers(instructions: str | None, body: list[ChatMessage]) -> ChatHistory:
    at = len(body)
    while body[at - 1].role == "tool":
        at -= 1
    asked = body[at - 1]  # (an assistant message with calls: _check_calls)
    outputs = {message.call_id or "": message.text for message in body[at:]}
    missing = [call for call in asked.call_ids if call not in outputs]
    if missing:
        raise Unsupported(
            f"{asked.where}: its calls {', '.join(missing)} have no tool message: answer every "
            "call of the last assistant message",
            param="messages",
        )
    earlier = tuple(body[: at - 1])
    return ChatHistory(
        instructions, earlier, outputs=outputs, answered=asked, boundaries=_boundaries(earlier)
    )


def _check_calls(body: list[ChatMessage]) -> None:
    """Every tool message answers a call of the assistant message before it, once; every call
    but the last assistant message's is answered before the next user or assistant message."""
    open_calls: dict[str, ChatMessage] = {}
    seen: set[str] = set()
    for message in body:
        if message.role == "tool":
            call = message.call_id or ""
            if call not in open_calls:
                raise Unsupported(
                    f"{message.where}: tool_call_id {call!r} answers no open call of the "
                    "assistant message before it",
                    param="messages",
                )
            del open_calls[call]
            continue
        if open_calls:
            asker = next(iter(open_calls.values()))
            raise Unsupported(
                f"{asker.where}: its calls {', '.join(open_calls)} have no tool message before "
                f"{message.where}",
                param="messages",
            )
        for call in message.call_ids:
            if call in seen:
                raise Unsupported(
                    f"{message.where}: tool call id {call!r} is used twice in the history",
                    param="messages",
                )
            seen.add(call)
            open_calls[call] = message


def _boundaries(earlier: tuple[ChatMessage, ...]) -> tuple[int, ...]:
    """The positions right after each group of user messages."""
    return tuple(
        index + 1
        for index, message in enumerate(earlier)
        if message.role == "user"
        and (index + 1 == len(earlier) or earlier[index + 1].role != "user")
    )


def _reduced(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    """Each message as the model is sent it: a group of user messages as one (their texts
    joined, as a new turn takes them), an assistant's text and call ids, a tool's output."""
    out: list[dict[str, Any]] = []
    group: list[ChatMessage] = []
    for message in (*messages, None):
        if message is not None and message.role == "user":
            group.append(message)
            continue
        if group:
            files = tuple(file for user in group for file in user.files)
            text = "\n\n".join(user.text for user in group if user.text)
            out.append({"role": "user", "text": text, "files": _hashes(files)})
            group = []
        if message is not None:
            out.append(message.reduced)
    return out


def _hashes(files: tuple[dict[str, Any], ...]) -> list[str]:
    return [hashlib.sha256(str(file.get("data")).encode()).hexdigest() for file in files]


__all__ = ["ChatHistory", "read_history"]
