"""Chat Completions `messages`, each read into a `ChatMessage`, or refused naming `messages[i]`.
Pure.

    role        taken
    ----------  -------------------------------------------------------------------------------
    system,     text (a string, or `text` parts): a conversation's instructions, at its start
    developer
    user        text, `image_url` parts (a data: URL) and `file` parts (`file_data`): its files
    assistant   text (`text` or `refusal` parts, or none) and `tool_calls` (function calls)
    tool        `tool_call_id` and its text: the output of that call
    function    refused (the deprecated form of `tool`)

A part or field this server cannot carry (audio, a file by id or URL, the deprecated
`function_call`) is refused rather than dropped: the model would not see it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.api.responses.errors import Unsupported

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatMessage:
    where: str  # "messages[i]", for errors
    role: str
    text: str = ""
    files: tuple[dict[str, Any], ...] = ()
    calls: tuple[ChatCall, ...] = ()  # an assistant's
    call_id: str | None = None  # a tool message's

    @property
    def call_ids(self) -> list[str]:
        return [call.id for call in self.calls]

    @property
    def reduced(self) -> dict[str, Any]:
        """What names it in a history's digest (the model is sent nothing else of it)."""
        if self.role == "assistant":
            return {"role": "assistant", "text": self.text, "calls": self.call_ids}
        if self.role == "tool":
            return {"role": "tool", "call": self.call_id, "text": self.text}
        return {"role": self.role, "text": self.text}


def read_messages(value: Any) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise Unsupported("messages must be a non-empty list", param="messages")
    return [_message(item, f"messages[{index}]") for index, item in enumerate(value)]


def _message(item: Any, where: str) -> ChatMessage:
    if not isinstance(item, dict):
        raise Unsupported(f"{where} must be an object", param="messages")
    role = item.get("role")
    if role == "function" or item.get("function_call") is not None:
        raise Unsupported(
            f"{where}: function messages and function_call are the deprecated forms: use "
            "tool_calls and tool messages",
            param="messages",
        )
    if role not in ROLES:
        raise Unsupported(
            f"{where}.role must be one of {', '.join(ROLES)} (got {role!r})", param="messages"
        )
    content = item.get("content")
    if role == "user":
        files: list[dict[str, Any]] = []
        text = _text(content, where, files)
        if not text and not files:
            raise Unsupported(f"{where}: a user message needs text or a file", param="messages")
        return ChatMessage(where, role, text, tuple(files))
    if role == "assistant":
        text = "" if content is None else _text(content, where, None)
        calls = _calls(item.get("tool_calls"), where)
        if not text and not calls and not isinstance(item.get("refusal"), str):
            raise Unsupported(
                f"{where}: an assistant message needs content or tool_calls", param="messages"
            )
        return ChatMessage(where, role, text or str(item.get("refusal") or ""), calls=calls)
    if role == "tool":
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise Unsupported(f"{where}.tool_call_id must be a string", param="messages")
        return ChatMessage(where, role, _text(content, where, None), call_id=call_id)
    return ChatMessage(where, role, _text(content, where, None))


def _text(content: Any, where: str, files: list[dict[str, Any]] | None) -> str:
    """The text of `content` (a string or parts); a user's files appended to `files`."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Unsupported(f"{where}.content must be a string or a list of parts", param="messages")
    texts: list[str] = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str) and files is None:
            texts.append(part["refusal"])
        elif kind in ("image_url", "file") and files is not None:
            files.append(_file(part, at))
        else:
            taken = "text, image_url and file" if files is not None else "text"
            raise Unsupported(f"{at} is a {kind!r} part: {taken} parts are taken", param=at)
    return "".join(texts)


def _file(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An `image_url` (a data: URL) or `file` part (`file_data`, `filename`) as a message's file;
    a URL or a `file_id` is refused: this server fetches nothing."""
    if part["type"] == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str) or not url.startswith("data:"):
            raise Unsupported(
                f"{where}.image_url.url must be a data: URL holding the image (this server "
                "fetches nothing)",
                param=where,
            )
        return {"data": url}
    given = part.get("file")
    if not isinstance(given, dict) or given.get("file_id") is not None:
        raise Unsupported(
            f"{where}.file must hold file_data (a file_id is not taken: send the bytes)",
            param=where,
        )
    data = given.get("file_data")
    if not isinstance(data, str) or not data:
        raise Unsupported(f"{where}.file.file_data must be the file (a data: URL)", param=where)
    name = given.get("filename")
    return {"data": data} if not isinstance(name, str) else {"data": data, "name": name}


def _calls(value: Any, where: str) -> tuple[ChatCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Unsupported(f"{where}.tool_calls must be a list", param="messages")
    calls: list[ChatCall] = []
    for index, call in enumerate(value):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise Unsupported(f"{at} must be a function call", param="messages")
        call_id, name = call.get("id"), function.get("name")
        arguments = function.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
            raise Unsupported(f"{at} needs an id and function.name", param="messages")
        if not isinstance(arguments, str):
            raise Unsupported(f"{at}.function.arguments must be a string", param="messages")
        calls.append(ChatCall(call_id, name, arguments))
    return tuple(calls)


__all__ = ["ChatCall", "ChatMessage", "read_messages"]
