"""A create request's `input` read: the user's message (its text and files), the answers to what
a response waits for (`function_call_output`, `mcp_approval_response`), and a stateless history's
anchor or copy (history.py); refused naming `input[i]`. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.api.responses.errors import Unsupported
from app.api.responses.history import History, read_history
from app.api.responses.ids import call_of_approval_request
from app.client.views import Decision


@dataclass(frozen=True)
class Input:
    history: History | None  # (a list input's)
    text: str | None
    outputs: dict[str, str]
    approvals: dict[str, Decision]
    files: list[dict[str, Any]]


def read_input(value: Any, *, chained: bool, given: Any) -> Input:
    """`input` read: a string, or items (a stateless history among them: history.py), checked
    against `previous_response_id` (`chained`) and `conversation` (`given`)."""
    history = read_history(value) if isinstance(value, list) and value else None
    if history is not None and history.anchor is not None and chained:
        raise Unsupported(
            f"{history.anchor.where} is an item of an earlier response, and previous_response_id "
            "is given: send the whole history, or previous_response_id and the new items",
            param="input",
        )
    if history is not None and not history.new:
        said = (
            "holds only instructions and reasoning items"
            if history.anchor is None
            else f"ends with {history.anchor.where}, an item of ours: nothing new follows it"
        )
        raise Unsupported(f"input {said} (a message or the answers are missing)", param="input")
    text, outputs, approvals, files = _input(
        value if history is None else [item for _, item in history.new],
        None if history is None else [index for index, _ in history.new],
    )
    if text is not None and (outputs or approvals):
        raise Unsupported(
            "input holds a message and answers: send the answers (with previous_response_id) "
            "first, then the message",
            param="input",
        )
    if history is not None and history.earlier and (chained or given is not None):
        raise Unsupported(
            "input holds a history written elsewhere (an assistant message without an id of "
            "ours), which starts a new conversation: give no previous_response_id or "
            "conversation with it",
            param="input",
        )
    anchored = history is not None and history.anchor is not None
    if (outputs or approvals) and not chained and not anchored:
        raise Unsupported(
            "function_call_output and mcp_approval_response answer a response: give its "
            "previous_response_id",
            param="previous_response_id",
        )
    return Input(history, text, outputs, approvals, files)


def _input(
    value: Any, positions: list[int] | None = None
) -> tuple[str | None, dict[str, str], dict[str, Decision], list[dict[str, Any]]]:
    """The new items (at `positions` of the input, if not all of it): the user's text and
    files, the answers."""
    if isinstance(value, str):
        return value, {}, {}, []
    if not isinstance(value, list) or not value:
        raise Unsupported("input must be a string or a non-empty list of items", param="input")
    texts: list[str] = []
    files: list[dict[str, Any]] = []  # the messages' input_image and input_file parts
    outputs: dict[str, str] = {}
    approvals: dict[str, Decision] = {}
    for position, item in enumerate(value):
        where = f"input[{position if positions is None else positions[position]}]"
        if not isinstance(item, dict):
            raise Unsupported(f"{where} must be an object", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            texts.append(_user_text(item, where, files))
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str) or not call_id:
                raise Unsupported(f"{where}.call_id must be a string", param=where)
            if not isinstance(output, str):
                raise Unsupported(
                    f"{where}.output must be a string (other output kinds are not supported)",
                    param=where,
                )
            _once(call_id, outputs, approvals, where)
            outputs[call_id] = output
        elif kind == "mcp_approval_response":
            call_id = call_of_approval_request(item.get("approval_request_id"))
            approve, reason = item.get("approve"), item.get("reason")
            if not isinstance(approve, bool):
                raise Unsupported(f"{where}.approve must be true or false", param=where)
            if reason is not None and not isinstance(reason, str):
                raise Unsupported(f"{where}.reason must be a string", param=where)
            _once(call_id, outputs, approvals, where)
            approvals[call_id] = Decision(approve, reason)
        else:
            raise Unsupported(
                f"{where} is of type {kind!r}: this server takes message, "
                "function_call_output and mcp_approval_response items",
                param=where,
            )
    return ("\n\n".join(texts) if texts else None), outputs, approvals, files


def _once(
    call_id: str, outputs: dict[str, str], approvals: dict[str, Decision], where: str
) -> None:
    if call_id in outputs or call_id in approvals:
        raise Unsupported(f"{where} answers call {call_id!r} a second time", param=where)


def _user_text(item: dict[str, Any], where: str, files: list[dict[str, Any]]) -> str:
    if item.get("role") != "user":
        raise Unsupported(
            f"{where}: only user messages are taken (give a new conversation's instructions "
            "with instructions)",
            param=where,
        )
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise Unsupported(f"{where}.content must be a string or a list of parts", param=where)
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind in ("input_image", "input_file"):
            files.append(_input_file(part, f"{where}.content[{index}]"))
            continue
        if kind != "input_text":
            raise Unsupported(
                f"{where}.content holds a {kind!r} part: input_text, input_image and "
                "input_file are taken",
                param=where,
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise Unsupported(f"{where}.content's input_text needs a text string", param=where)
        parts.append(text)
    return "".join(parts)


def _input_file(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An `input_image` (`image_url`) or `input_file` (`file_data`, `filename`) as one of the
    message's files: its bytes in the request (a data: URL or base64); a URL or a `file_id` is
    refused (this server fetches nothing)."""
    image = part.get("type") == "input_image"
    field = "image_url" if image else "file_data"
    for elsewhere in ("file_id", "file_url"):
        if part.get(elsewhere) is not None:
            raise Unsupported(
                f"{where}: {elsewhere} is not supported: send the bytes in {field} (a data: "
                "URL); this server fetches nothing",
                param=where,
            )
    data = part.get(field)
    if not isinstance(data, str) or (image and not data.startswith("data:")):
        raise Unsupported(
            f"{where}.{field} must be a data: URL holding the file (this server fetches nothing)",
            param=where,
        )
    name = part.get("filename")
    return {"data": data} if name is None else {"data": data, "name": name}


__all__ = ["Input", "read_input"]
