"""Printing a conversation as it happens: status changes and each new message, by polling.

Used by `chatworker status --follow` and `chatworker demo`; it reads through the web-app client,
exactly as a web page would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TextIO

from app.client import ChatClient, ConversationView, MessageView

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


def follow(
    client: ChatClient,
    conversation_id: uuid.UUID,
    out: TextIO,
    *,
    poll_interval: float = 0.2,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ConversationView:
    """Print status changes and new messages until the conversation rests (idle or failed)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    cursor: int | None = None
    status: str | None = None
    while True:
        view = client.get_conversation(conversation_id, after_seq=cursor)
        for message in view.messages:
            print(render_message(message), file=out, flush=True)
        cursor = view.cursor(cursor)
        if view.status != status:
            status = view.status
            detail = f": {view.error}" if view.error else ""
            print(f"[{status}]{detail}", file=out, flush=True)
        if not view.is_running:
            return view
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"conversation {conversation_id} still {status} after {timeout} s")
        sleep(poll_interval)


def _preview(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + " ..."


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"))
    except ValueError:
        return arguments
