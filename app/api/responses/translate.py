"""A turn as OpenAI responses: its committed events cut into responses at its pauses, each with
its input items, its output items and its status. Pure: no I/O (the routes read the turn, its
conversation and its events, and hand them here).

    what is committed                            what the response shows
    -------------------------------------------  ---------------------------------------------
    the turn's user message                      input: a user `message` (input_text, and
                                                 input_image / input_file by `file_id`: the
                                                 file's id here, GET /v1/files/{id})
    an assistant message's text                  output: a `message` (output_text)
    an answer the turn's JSON Schema refused     nothing: the model was asked again (its live
                                                 text was discarded)
    a call of a worker's tool (MCP, or the       output: an `mcp_call` (server_label: the MCP
    session cache's readers)                     server; the worker's own: "chatworker"), its
                                                 `output` or `error` once its result commits
    a call that waits for the client (a client   output: a `function_call` (the response ends
    tool, `agent_clarify`)                       there, `completed`)
    a call that waits for an approval            output: an `mcp_approval_request`; the call's
                                                 `mcp_call` (with `approval_request_id`) is in
                                                 the next response
    the answers committed while the turn waited  input of the next response:
                                                 `function_call_output`, `mcp_approval_response`
    a call answered by the worker itself (bad    nothing of its own: the model read the error
    arguments, a cancel) that the client owns

    turn status                       response status
    --------------------------------  --------------------------------------------------------
    queued                            queued
    running                           in_progress (a response after a pause: queued until a
                                      worker resumes the turn)
    requires_action                   completed (the pause's response; nothing follows yet)
    completed | failed | cancelled    completed | failed | cancelled (only the last response
                                      of the turn: every earlier one ended at its pause)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.api.responses.ids import (
    ResponseId,
    approval_request_item,
    approval_response_item,
    function_call_item,
    function_output_item,
    mcp_call_item,
    message_item,
)
from app.client.views import EventView, MessageView, TurnView
from app.models import ACTION_REQUIRED, MESSAGE_COMMITTED, TURN_RESUMED, TURN_STARTED

OWN_SERVER = "chatworker"  # the server_label of the worker's own tools (the session cache)
USER_SAID = " The user said: "  # how a denial's reason is told to the model (store/answers.py)

STATUS_OF_TURN = {
    "queued": "queued",
    "running": "in_progress",
    "requires_action": "completed",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}


@dataclass(frozen=True)
class Tools:
    """How the conversation's tools are shown: which names the client answers, which server
    each worker-run tool comes from."""

    client: frozenset[str]  # client tools and agent_clarify: function_call items
    servers: dict[str, str] = field(default_factory=dict)  # tool name -> its MCP server

    def server_of(self, name: str) -> str:
        return self.servers.get(name, OWN_SERVER)


@dataclass
class Segment:
    """One response of a turn, as committed so far."""

    id: ResponseId
    input: list[dict[str, Any]] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)
    paused: bool = False  # it ended at a pause (an earlier response, or the current pause)
    started: bool = False  # a worker has worked on it (for a response after a pause)


def segments(turn: TurnView, events: Sequence[EventView], tools: Tools) -> list[Segment]:
    """The turn's responses, in order, from its events (each `message.committed` with its
    message)."""
    cut = Cutter(turn, tools)
    for event in events:
        cut.take(event)
    return cut.done()


def response_status(turn: TurnView, segment: Segment) -> str:
    if segment.paused:
        return "completed"  # it ended at a pause, whatever the turn did after
    if segment.id.segment > 0 and turn.status == "running" and not segment.started:
        return "queued"
    return STATUS_OF_TURN[turn.status]


class Cutter:
    def __init__(self, turn: TurnView, tools: Tools) -> None:
        self.turn = turn
        self.tools = tools
        self.done_segments: list[Segment] = []
        self.current = Segment(ResponseId(turn.id, 0))
        self.calls: dict[str, dict[str, Any]] = {}  # call id -> the call, as the model made it
        self.open: dict[str, dict[str, Any]] = {}  # calls without a result, in order
        self.waiting: dict[str, str] = {}  # the last pause's call ids -> their item kind
        self.answering = False  # between a pause and the worker's resume: answers come in
        self.mcp_items: dict[str, dict[str, Any]] = {}  # call id -> its mcp_call item

    def take(self, event: EventView) -> None:
        if event.type == ACTION_REQUIRED:
            self._pause()
        elif event.type in (TURN_STARTED, TURN_RESUMED):
            self.answering = False
            self.current.started = True
        elif event.type == MESSAGE_COMMITTED and event.message is not None:
            self._message(event.message)

    def done(self) -> list[Segment]:
        """The responses so far: the one after a pause exists once an answer came in."""
        current = self.current
        if self.done_segments and not (current.input or current.output or current.started):
            return list(self.done_segments)
        return [*self.done_segments, current]

    # --- what each committed thing becomes ------------------------------------------------------

    def _message(self, message: MessageView) -> None:
        if message.role == "user":
            self.current.input.append(_user_message(self.turn.id, message))
        elif message.role == "assistant":
            self._assistant(message)
        elif message.role == "tool" and message.tool_call_id is not None:
            self._result(message)

    def _assistant(self, message: MessageView) -> None:
        if message.is_error and not message.tool_calls:
            return  # an answer its schema refused: the worker asked again (its live text dropped)
        if message.content:
            self.current.output.append(_reply(self.turn.id, message))
        for call in message.tool_calls:
            call_id = str(call.get("id", ""))
            self.calls[call_id] = call
            self.open[call_id] = call
            if self._is_client(call):
                continue  # shown only if the turn waits for it (a function_call at the pause)
            item = _mcp_call(call, self.tools.server_of(_name(call)))
            self.mcp_items[call_id] = item
            self.current.output.append(item)

    def _result(self, message: MessageView) -> None:
        call_id = message.tool_call_id or ""
        call = self.open.pop(call_id, None)
        if call is None:
            return
        kind = self.waiting.pop(call_id, None)
        if self.answering and kind == "function_call":
            self.current.input.append(_function_output(call_id, message.content or ""))
            return
        if self.answering and kind == "approval":
            self.current.input.append(
                _approval_response(call_id, approve=False, reason=_denial_reason(message))
            )
            return
        item = self.mcp_items.get(call_id)
        if item is None:
            return  # a client's call answered by the worker (a bad call, a cancel)
        if message.is_error:
            item["error"] = message.content or "the tool failed"
        else:
            item["output"] = message.content or ""
        item["status"] = "failed" if message.is_error else "completed"

    def _pause(self) -> None:
        """The turn waits for every open call: client calls as function_call items, the others
        as approval requests (their mcp_call item moves to the response after the answer)."""
        self.waiting = {}
        for call_id, call in self.open.items():
            if self._is_client(call):
                self.current.output.append(_function_call(call))
                self.waiting[call_id] = "function_call"
            else:
                moved = self.mcp_items.get(call_id)
                if moved is not None and moved in self.current.output:
                    self.current.output.remove(moved)
                self.current.output.append(
                    _approval_request(call, self.tools.server_of(_name(call)))
                )
                self.waiting[call_id] = "approval"
        self.current.paused = True
        self.done_segments.append(self.current)
        self.current = Segment(ResponseId(self.turn.id, self.current.id.segment + 1))
        self.answering = True
        self._approvals()

    def _approvals(self) -> None:
        """The approval answers of the pause just cut: approved calls go on in the next
        response (their mcp_call first, with the approval's id); a denial is a tool message
        the cutter meets as an answer."""
        decided = {a.call_id: a for a in self.turn.actions if a.kind == "approval"}
        for call_id, kind in list(self.waiting.items()):
            if kind != "approval":
                continue
            action = decided.get(call_id)
            approved = action is not None and action.decision == "approved"
            if not approved:
                continue  # undecided yet, or denied (its message says so)
            call = self.calls[call_id]
            self.current.input.append(_approval_response(call_id, approve=True, reason=None))
            item = _mcp_call(call, self.tools.server_of(_name(call)))
            item["approval_request_id"] = approval_request_item(call_id)
            self.mcp_items[call_id] = item
            self.current.output.append(item)
            del self.waiting[call_id]

    def _is_client(self, call: dict[str, Any]) -> bool:
        return _name(call) in self.tools.client


# --- the items --------------------------------------------------------------------------------


def _name(call: dict[str, Any]) -> str:
    """A committed call is `{"id", "name", "arguments"}` (`worker/entry.py`'s `ToolCall`)."""
    return str(call.get("name", ""))


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments") or "{}"
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _user_message(turn_id: uuid.UUID, message: MessageView) -> dict[str, Any]:
    return {
        "id": message_item(turn_id, message.seq),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [
            {"type": "input_text", "text": message.content or ""},
            *(_input_file(file) for file in message.files),
        ],
    }


def _input_file(file: dict[str, Any]) -> dict[str, Any]:
    """A message's file as OpenAI's input part, by its id here (`GET /v1/files/{id}`)."""
    if str(file.get("media_type", "")).startswith("image/"):
        return {"type": "input_image", "file_id": file["id"], "image_url": None, "detail": "auto"}
    return {"type": "input_file", "file_id": file["id"], "filename": file.get("name")}


def _reply(turn_id: uuid.UUID, message: MessageView) -> dict[str, Any]:
    return {
        "id": message_item(turn_id, message.seq),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [_output_text(message.content or "")],
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _function_call(call: dict[str, Any]) -> dict[str, Any]:
    call_id = str(call.get("id", ""))
    return {
        "id": function_call_item(call_id),
        "type": "function_call",
        "call_id": call_id,
        "name": _name(call),
        "arguments": _arguments(call),
        "status": "completed",
    }


def _function_output(call_id: str, output: str) -> dict[str, Any]:
    return {
        "id": function_output_item(call_id),
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }


def _mcp_call(call: dict[str, Any], server: str) -> dict[str, Any]:
    call_id = str(call.get("id", ""))
    return {
        "id": mcp_call_item(call_id),
        "type": "mcp_call",
        "server_label": server,
        "name": _name(call),
        "arguments": _arguments(call),
        "output": None,
        "error": None,
        "status": "in_progress",
    }


def _approval_request(call: dict[str, Any], server: str) -> dict[str, Any]:
    call_id = str(call.get("id", ""))
    return {
        "id": approval_request_item(call_id),
        "type": "mcp_approval_request",
        "server_label": server,
        "name": _name(call),
        "arguments": _arguments(call),
    }


def _approval_response(call_id: str, *, approve: bool, reason: str | None) -> dict[str, Any]:
    return {
        "id": approval_response_item(call_id),
        "type": "mcp_approval_response",
        "approval_request_id": approval_request_item(call_id),
        "approve": approve,
        "reason": reason,
    }


def _denial_reason(message: MessageView) -> str | None:
    text = message.content or ""
    _, said, reason = text.partition(USER_SAID)
    return reason.strip() or None if said else None
