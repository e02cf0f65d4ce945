"""A turn as the AI SDK's UI message stream (protocol v1): the chunks `useChat` reads into one
assistant message. Pure: the route feeds it what a follower of the conversation hands out
(committed events with their messages, the reply's live deltas, discards) and writes out what
it returns, each chunk as `data: {json}`.

    what comes in                         chunks
    ------------------------------------  ---------------------------------------------------------
    (the start)                           start (messageId: the turn's)
    a reply's live delta                  start-step (the step's first), text-start (the
                                          reply's first), text-delta
    the reply committed                   the text not yet sent as one text-delta, text-end;
                                          a structured answer's parsed object as `data-output`
    its tool calls                        tool-input-start, tool-input-available (a worker's
                                          tool: `dynamic`, as MCP tools are in the AI SDK; a
                                          client tool or agent_clarify: static, `tool-<name>`)
    a call's result committed             tool-output-available | tool-output-error; a denied
                                          approval: tool-output-denied
    the pause (calls for the client,      tool-approval-request per call waiting for approval,
    approvals asked)                      finish-step, finish (finishReason "tool-calls")
    the end                               finish-step, then finish ("stop"); a failed turn:
                                          error (its message), finish ("error"); a cancelled
                                          one: abort, finish ("other")
    a live reply discarded (a retry,      text-end with providerMetadata.chatworker.discarded:
    its worker died, ...)                 the AI SDK cannot take text back out of a message, so
                                          the part is ended and marked (live only: a replay, as
                                          `resumeStream()` asks for, never shows it)

A stream that continues a turn after the client answered its pause (`continues_after`: the
pause's event) reads the turn from its start, to know its calls, and writes only what came
after, without the client's own answers: the client holds all that in the same assistant
message (a replay writes the answers as tool-output-available, JSON read back as JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.client.views import EventView, MessageView, TurnView
from app.live.entries import Delta, Discarded
from app.models import (
    ACTION_REQUIRED,
    MESSAGE_COMMITTED,
    TERMINAL_EVENTS,
    TURN_CANCELLED,
    TURN_FAILED_EVENT,
    TURN_RESUMED,
    TURN_STARTED,
)
from app.vocabulary import LIVE_TYPES, NOTICE_EVENTS

Chunk = dict[str, Any]
# What this dialect shows, and what it passes over on purpose: the notices around a turn
# (`app.vocabulary.NOTICE_EVENTS`) are not a UI message's business. A test holds both to the
# vocabulary (tests/unit/test_renderer_coverage.py).
HANDLED = frozenset(
    (TURN_STARTED, TURN_RESUMED, MESSAGE_COMMITTED, ACTION_REQUIRED, *TERMINAL_EVENTS, *LIVE_TYPES)
)
SKIPPED = frozenset(NOTICE_EVENTS)
VENDOR = "chatworker"  # our key in a chunk's providerMetadata


def approval_id(call_id: str) -> str:
    """The id of the approval a call waits for (what `addToolApprovalResponse` names)."""
    return f"approval_{call_id}"


def message_id(turn: TurnView) -> str:
    """The assistant message a turn streams into: one per turn, across its pauses."""
    return str(turn.id)


@dataclass
class _Text:
    id: str
    seq: int  # the message it will be committed as
    stream: str  # the model call streaming it ("" once committed)
    sent: str  # what the client holds


class UiMessageChunks:
    """One turn's chunks; `feed` each item a follower hands out, in order, until `ended`."""

    def __init__(
        self,
        turn: TurnView,
        client_tools: frozenset[str],
        *,
        continues_after: int = 0,
        answered_through: int = 0,
    ) -> None:
        """`client_tools`: the names the client answers (its own tools, agent_clarify);
        `continues_after`: committed events up to this seq are read, not written, and the
        client's answers after it are not written back; `answered_through`: the turn's pauses
        up to this seq were answered when the stream opened (they are history: the stream goes
        through them; a later pause ends it)."""
        self.turn = turn
        self.client_tools = client_tools
        self.continues_after = continues_after
        self.answered_through = answered_through
        self.ended = False
        self._step = False
        self._model_done = False  # the step's model call is committed: what follows is its tools
        self._text: _Text | None = None
        self._parts = 0  # text parts opened (their ids)
        self._open: dict[str, str] = {}  # calls without a result -> their name
        self._waiting: dict[str, str] = {}  # the last pause's calls -> "client" | "approval"
        self._answering = False  # between a pause and the worker's resume
        self._last_seq = 0  # the turn's last committed message
        self._quiet = continues_after > 0

    def begin(self) -> list[Chunk]:
        return [{"type": "start", "messageId": message_id(self.turn)}]

    def feed(self, item: EventView | Delta | Discarded) -> list[Chunk]:
        if self.ended:
            return []
        if isinstance(item, EventView):
            if item.turn_id != self.turn.id:
                return []
            self._quiet = item.seq <= self.continues_after
            out = self._committed(item)
            return [] if self._quiet else out
        if self._quiet:
            return []
        if isinstance(item, Delta):
            return self._delta(item)
        return self._discarded(item)

    # --- committed ----------------------------------------------------------------------------

    def _committed(self, event: EventView) -> list[Chunk]:
        if event.type in (TURN_STARTED, TURN_RESUMED):
            self._answering = False
            return []
        if event.type == MESSAGE_COMMITTED and event.message is not None:
            return self._message(event.message)
        if event.type == ACTION_REQUIRED:
            return self._pause(answered=event.seq <= self.answered_through)
        if event.type in TERMINAL_EVENTS:
            return self._end(event.type)
        return []

    def _message(self, message: MessageView) -> list[Chunk]:
        self._last_seq = max(self._last_seq, message.seq)
        if message.role == "assistant" and message.is_error and not message.tool_calls:
            return []  # an answer its schema refused: the model is asked again (live: discarded)
        if message.role == "assistant":
            return self._assistant(message)
        if message.role == "tool" and message.tool_call_id is not None:
            return self._result(message)
        return []

    def _assistant(self, message: MessageView) -> list[Chunk]:
        out = self._start_step()
        live = self._text
        if live is not None and (
            live.seq != message.seq or not (message.content or "").startswith(live.sent)
        ):
            out += self._drop_text("the committed reply is another attempt")
            live = None
        if message.content:
            if live is None:
                live = self._open_text(message.seq, "")
                out.append({"type": "text-start", "id": live.id})
            rest = message.content[len(live.sent) :]
            if rest:
                out.append({"type": "text-delta", "id": live.id, "delta": rest})
            out.append({"type": "text-end", "id": live.id})
            self._text = None
        if message.output is not None:  # a structured answer: its parsed object beside the text
            out.append(
                {"type": "data-output", "id": f"output-{message.seq}", "data": message.output}
            )
        for call in message.tool_calls:
            call_id, name = str(call.get("id", "")), str(call.get("name", ""))
            self._open[call_id] = name
            tool: Chunk = {"toolCallId": call_id, "toolName": name}
            if name not in self.client_tools:
                tool["dynamic"] = True
            out.append({"type": "tool-input-start", **tool})
            out.append({"type": "tool-input-available", **tool, "input": _input(call)})
        self._model_done = True
        return out

    def _result(self, message: MessageView) -> list[Chunk]:
        call_id = message.tool_call_id or ""
        if self._open.pop(call_id, None) is None:
            return []
        kind = self._waiting.pop(call_id, None)
        if self._answering and kind == "approval":
            return [{"type": "tool-output-denied", "toolCallId": call_id}]
        if message.is_error:
            error = message.content or "the tool failed"
            return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": error}]
        output: Any = message.content or ""
        if self._answering and kind == "client":
            if self.continues_after:
                return []  # the client gave it: it holds it as it gave it
            output = _output(output)
        return [{"type": "tool-output-available", "toolCallId": call_id, "output": output}]

    def _pause(self, *, answered: bool) -> list[Chunk]:
        """The approvals asked, the step ended; a pause not answered yet ends the stream (the
        client answers with its next request), an answered one is history."""
        out: list[Chunk] = []
        self._waiting = {}
        for call_id, name in self._open.items():
            if name in self.client_tools:
                self._waiting[call_id] = "client"
            else:
                self._waiting[call_id] = "approval"
                out.append(
                    {
                        "type": "tool-approval-request",
                        "approvalId": approval_id(call_id),
                        "toolCallId": call_id,
                    }
                )
        self._answering = True
        out += self._finish_step()
        if not answered:
            out.append({"type": "finish", "finishReason": "tool-calls"})
            self.ended = True
        return out

    def _end(self, event_type: str) -> list[Chunk]:
        out = self._drop_text("the turn ended") if self._text is not None else []
        out += self._finish_step()
        if event_type == TURN_FAILED_EVENT:
            error = self.turn.error or "the turn failed"
            out += [
                {"type": "error", "errorText": error},
                {"type": "finish", "finishReason": "error"},
            ]
        elif event_type == TURN_CANCELLED:
            out += [
                {"type": "abort", "reason": "cancelled"},
                {"type": "finish", "finishReason": "other"},
            ]
        else:
            out.append({"type": "finish", "finishReason": "stop"})
        self.ended = True
        return out

    # --- steps and text -------------------------------------------------------------------------

    def _start_step(self) -> list[Chunk]:
        """A step is one model call and the tools it called: the next model call's first
        delta or commit starts the next one."""
        out = self._finish_step() if self._model_done else []
        if self._step:
            return out
        self._step = True
        return [*out, {"type": "start-step"}]

    def _finish_step(self) -> list[Chunk]:
        self._model_done = False
        if not self._step:
            return []
        self._step = False
        self._text = None
        return [{"type": "finish-step"}]

    def _open_text(self, seq: int, stream: str) -> _Text:
        self._parts += 1
        self._text = _Text(f"text_{seq}_{self._parts}", seq, stream, "")
        return self._text

    def _drop_text(self, reason: str) -> list[Chunk]:
        live = self._text
        assert live is not None
        self._text = None
        marked = {VENDOR: {"discarded": True, "reason": reason}}
        return [{"type": "text-end", "id": live.id, "providerMetadata": marked}]

    # --- live -----------------------------------------------------------------------------------

    def _delta(self, delta: Delta) -> list[Chunk]:
        if delta.message_seq <= self._last_seq or self._answering or not delta.text:
            return []
        out: list[Chunk] = []
        live = self._text
        if live is not None and (live.seq != delta.message_seq or live.stream != delta.stream):
            out += self._drop_text("the model call started over")
            live = None
        if live is None:
            out += self._start_step()
            live = self._open_text(delta.message_seq, delta.stream)
            out.append({"type": "text-start", "id": live.id})
        out.append({"type": "text-delta", "id": live.id, "delta": delta.text})
        live.sent += delta.text
        return out

    def _discarded(self, discarded: Discarded) -> list[Chunk]:
        live = self._text
        if live is None or not discarded.drops(live.seq, live.stream):
            return []
        return self._drop_text(discarded.reason)


def _output(text: str) -> Any:
    """A client's answer as it gave it: JSON read back (answers are kept as text)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # (nested past the parser)
        return text


def _input(call: dict[str, Any]) -> Any:
    """A call's arguments as the AI SDK holds them (an object; the text when it is not JSON)."""
    arguments = call.get("arguments") or "{}"
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):  # (nested past the parser)
        return arguments


__all__ = ["VENDOR", "Chunk", "UiMessageChunks", "approval_id", "message_id"]
