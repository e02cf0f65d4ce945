"""Printing a conversation as it happens, from its event log: every status change (`tool_loop`
included) and each message, resumable from any event seq.

Used by `chatworker status --follow` and `chatworker demo`; it reads through the web-app client,
exactly as a web page would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TextIO

from app.client import ChatClient, ConversationView, EventView, MessageView
from app.models import (
    FAILED,
    IDLE,
    MESSAGE_COMMITTED,
    STATUS_CHANGED,
    TURN_CANCELLED,
    TURN_FAILED_EVENT,
    TURN_RESUMED,
)

PREVIEW_CHARS = 400
PAGE = 200
AT_REST = (IDLE, FAILED)


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
    if event.type == MESSAGE_COMMITTED and event.message is not None:
        return render_message(event.message)
    if event.type == TURN_RESUMED:
        return f"  (the turn resumed after its worker stopped: attempt {event.attempt})"
    if event.type == TURN_FAILED_EVENT and event.turn is not None:
        return f"  turn failed: {event.turn.error}"
    if event.type == TURN_CANCELLED:
        return "  turn cancelled"
    return None


def follow(
    client: ChatClient,
    conversation_id: uuid.UUID,
    out: TextIO,
    *,
    after: int = 0,
    poll_interval: float = 0.2,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ConversationView:
    """Print the conversation's events after `after` (every status change, each message) until it
    rests with every event printed. Each line is an event: a reader stopped at any point resumes
    with `after` = the last seq it printed (shown by `--after` in the CLI) and misses nothing."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        page = client.events(conversation_id, after=after, limit=PAGE)
        for event in page.events:
            line = render_event(event)
            if line is not None:
                print(line, file=out, flush=True)
            after = event.seq
        caught_up = after >= page.last_seq
        if caught_up and page.status in AT_REST:
            return client.get_conversation(conversation_id, after_seq=None)
        if not caught_up:
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"conversation {conversation_id} still {page.status} after {timeout} s "
                f"(resume with after={after})"
            )
        sleep(poll_interval)


def _preview(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + " ..."


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"))
    except ValueError:
        return arguments
