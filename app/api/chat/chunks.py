"""A response's stream of events (`responses.stream.ResponseEvents`) written as Chat Completions
chunks. Pure.

    Responses event                          chunk
    ---------------------------------------  ---------------------------------------------------
    response.created                         delta {role: assistant, content: ""}
    output_item.added (a message after       delta {content: "\\n\\n"} (the replies' separator,
    an earlier one)                          as the completion joins them)
    output_text.delta                        delta {content}
    output_item.added (a function_call)      delta {tool_calls: [{index, id, type, function:
                                             {name, arguments: ""}}]}
    function_call_arguments.delta            delta {tool_calls: [{index, function: {arguments}}]}
    mcp_* (a worker's tool call)             nothing: it runs inside the turn
    response.completed / .incomplete         delta {}, finish_reason tool_calls | stop; then,
                                             with include_usage, the usage (choices: [])
    response.failed                          {"error": {...}} (the SDKs raise it)
    a live reply discarded (a retry, its     nothing while the retried attempt repeats what was
    worker died) after text was sent         sent; if it says otherwise, an error: Chat
                                             Completions cannot take text back. The same request
                                             sent again gets the committed answer whole.

The route ends the stream with `data: [DONE]` after the last chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from app.api.chat.completion import SEPARATOR, completion_id, usage

RETRACTED = (
    "the reply was cut off (its model call was retried, or its worker stopped) and said "
    "otherwise the second time: send the same request again for the committed answer"
)


class ChatChunks:
    def __init__(self, response_id: str, model: str, created: int, include_usage: bool) -> None:
        self.id = completion_id(response_id)
        self.model, self.created, self.include_usage = model, created, include_usage
        self.ended = False
        self._calls: dict[str, int] = {}  # function_call item id -> its tool_calls index
        self._messages = 0  # replies opened
        self._sent = ""  # the text sent of the reply being streamed
        self._owed = ""  # text sent of a discarded attempt, which its retry must repeat
        self._separator = False  # a separator is due before the next text

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.ended:
            return []
        handler = self._HANDLERS.get(event["type"])
        return [] if handler is None else handler(self, event)

    def _created(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return [self._chunk({"role": "assistant", "content": "", "refusal": None})]

    def _arguments(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        index = self._calls.get(event["item_id"])
        if index is None or not event["delta"]:
            return []
        call = {"index": index, "function": {"arguments": event["delta"]}}
        return [self._chunk({"tool_calls": [call]})]

    def _done(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item = event["item"]
        if item["type"] == "message" and item.get("status") == "incomplete":
            self._owed, self._sent = self._sent, ""  # (its retry must say it again)
        return []

    def _failed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.ended = True
        error = event["response"].get("error") or {}
        message = f"the turn failed: {error.get('message') or 'no reason was recorded'}"
        return [_error(message, "turn_failed")]

    def _added(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item = event["item"]
        if item["type"] == "message":
            if not self._owed:
                self._separator = self._messages > 0
                self._messages += 1
                self._sent = ""
            return []
        if item["type"] != "function_call":
            return []
        index = self._calls[item["id"]] = len(self._calls)
        call = {
            "index": index,
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": ""},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _text(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        text = event["delta"]
        if self._owed:  # a retried attempt: what it repeats was sent already
            same = min(len(text), len(self._owed))
            if text[:same] != self._owed[:same]:
                self.ended = True
                return [_error(RETRACTED, "reply_retracted")]
            self._sent += text[:same]
            self._owed, text = self._owed[same:], text[same:]
            if not text:
                return []
        self._sent += text
        if self._separator:
            self._separator = False
            text = SEPARATOR + text
        return [self._chunk({"content": text})]

    def _end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        response = event["response"]
        self.ended = True
        reason = "tool_calls" if self._calls else "stop"
        out = [self._chunk({}, reason)]
        if self.include_usage:
            out.append({**self._chunk({}), "choices": [], "usage": usage(response)})
        return out

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    _HANDLERS: ClassVar[dict[str, Callable[[ChatChunks, dict[str, Any]], list[dict[str, Any]]]]] = {
        "response.created": _created,
        "response.output_item.added": _added,
        "response.output_text.delta": _text,
        "response.function_call_arguments.delta": _arguments,
        "response.output_item.done": _done,
        "response.completed": _end,
        "response.incomplete": _end,
        "response.failed": _failed,
    }


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


__all__ = ["ChatChunks"]
