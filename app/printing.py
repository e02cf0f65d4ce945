"""Printing a conversation as it happens: every status change (`tool_loop` included), each message,
and the assistant's words as they stream, resumable from any cursor.

Used by `chatworker status --follow` and `chatworker demo`; it reads through the web-app client's
`follow`, exactly as a web page would. A streamed reply is printed word by word after
`  assistant: `; when its message is committed the line is simply ended (the words were the
message), and a reply that was dropped (a retry, a crash, a cancel) is marked `[discarded: why]`
before what replaces it.
"""

from __future__ import annotations

import json
import uuid
from typing import TextIO

from app.client import ChatClient, ConversationView, Cursor, Delta, Discarded, EventView
from app.client.views import MessageView
from app.models import (
    CANCEL_REQUESTED,
    MESSAGE_COMMITTED,
    STATUS_CHANGED,
    TURN_CANCELLED,
    TURN_FAILED_EVENT,
    TURN_RESUMED,
)

PREVIEW_CHARS = 400


def render_message(message: MessageView) -> str:
    """One line (or a few) for a message, as a person reads a transcript."""
    if message.role == "assistant" and message.tool_calls:
        calls = ", ".join(
            f"{c['name']}({_compact(c.get('arguments', ''))})" for c in message.tool_calls
        )
        prefix = f"  assistant: {_preview(message.content)}\n" if message.content else ""
        return f"{prefix}  assistant -> {calls}"
    if message.role == "tool":
        marker = " (error)" if message.is_error else ""
        return f"  tool {message.tool_name}{marker}: {_preview(message.content)}"
    return f"  {message.role}: {_preview(message.content)}"


def render_event(event: EventView) -> str | None:
    """A line for an event of the log, or None for one a person need not see."""
    if event.type == STATUS_CHANGED:
        return f"[{event.status}]"
    if event.type == MESSAGE_COMMITTED:
        return render_message(event.message) if event.message is not None else None
    if event.type == TURN_RESUMED:
        return f"  (the turn resumed after its worker stopped: attempt {event.attempt})"
    if event.type == TURN_FAILED_EVENT:
        return f"  turn failed: {event.turn.error}" if event.turn is not None else None
    return _NOTES.get(event.type)


_NOTES = {CANCEL_REQUESTED: "  (cancel requested)", TURN_CANCELLED: "  turn cancelled"}


class Printer:
    """Prints followed items; a streamed reply stays on its line until it is committed."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._live: int | None = None  # the message whose words are being printed
        self._shown = ""  # what of it was printed

    def show(self, item: EventView | Delta | Discarded) -> None:
        if isinstance(item, Delta):
            self._words(item)
        elif isinstance(item, Discarded):
            if item.message_seq == self._live:
                self._end_line(f" [discarded: {item.reason}]")
        else:
            self._event(item)

    def _words(self, delta: Delta) -> None:
        text = delta.text
        if not text:
            return  # tool-call arguments are shown whole, once committed
        if self._live != delta.message_seq:
            self._end_line()
            self._write("  assistant: ")
            self._live, self._shown = delta.message_seq, ""
        self._shown += text
        self._write(text)

    def finish(self) -> None:
        """End a reply left half printed (the reader stopped)."""
        self._end_line()

    def _event(self, event: EventView) -> None:
        message = event.message
        if message is not None and message.seq == self._live:
            streamed = self._shown
            self._end_line()
            if message.content == streamed and not message.tool_calls:
                return  # the words printed were the message
        line = render_event(event)
        if line is not None:
            self._end_line()
            self._write(line + "\n")

    def _end_line(self, suffix: str = "") -> None:
        if self._live is not None:
            self._write(suffix + "\n")
        self._live, self._shown = None, ""

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def follow(
    client: ChatClient,
    conversation_id: uuid.UUID | str,
    out: TextIO,
    *,
    after: Cursor | int | str = 0,
    timeout: float | None = None,
    poll_interval: float = 1.0,
    resume_hint: TextIO | None = None,
) -> ConversationView:
    """Print the conversation after the cursor `after` until it rests with every event printed.

    A reader stopped at any point (Ctrl-C: the cursor is printed to `resume_hint`) resumes from
    the cursor it had reached and misses nothing; `TimeoutError` names that cursor too."""
    printer = Printer(out)
    following = client.follow(conversation_id, after, timeout=timeout, poll_interval=poll_interval)
    try:
        for item in following:
            printer.show(item)
    except KeyboardInterrupt:
        printer.finish()
        if resume_hint is not None:
            print(f"stopped; resume with --after {following.cursor}", file=resume_hint)
        raise
    printer.finish()
    return client.get_conversation(conversation_id, after_seq=None)


def _preview(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + " ..."


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"))
    except ValueError:
        return arguments
