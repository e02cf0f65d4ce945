"""**No I/O**: the request that asks a model to summarise the oldest part of a conversation, and
what its answer becomes (the `summary` of a compaction).

The summary replaces messages `from_seq..through` in what the model is sent from then on; an
earlier summary is part of what it summarises, so the latest one always covers messages 1..through.
Each message goes in as text, cut at `MESSAGE_CHARS` (a long tool output keeps its head; the
whole stays in the session cache, by its call id, which the summary is asked to keep); an output
already elided from what the model is sent (the model read it and answered on an earlier turn)
at `ELIDED_CHARS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.worker.context import MESSAGE_TOKENS, SUMMARY_TOKENS, text_tokens
from app.worker.plan import Entry

MARKER = "<conversation-to-summarize>"  # also how a test's fake model knows the request
MESSAGE_CHARS = 2_000
ELIDED_CHARS = 200
INSTRUCTIONS = (
    "You compact the history of a conversation between a user and an AI assistant that uses "
    "tools, so that the assistant can carry on without the original messages. Write a summary "
    "of at most {words} words that keeps: what the user asked for and still wants (their exact "
    "current request verbatim), decisions and facts established, names, numbers, identifiers "
    "and file or record names, what each tool call found (keep the call ids: the full outputs "
    "can be read again by id), what was promised or is still open. Leave out pleasantries and "
    "repetition. Write the summary only, in the conversation's language."
)
EMPTY_SUMMARY_ERROR = "The model wrote an empty summary while compacting the conversation"


def request_messages(
    previous: str | None,
    entries: Sequence[Entry],
    elided_through: int = 0,
    tokens: int = SUMMARY_TOKENS,
) -> list[dict[str, Any]]:
    """The messages of the summary request: instructions (a summary of at most about `tokens`),
    then the text to summarise (the outputs of messages up to `elided_through` shorter)."""
    words = int(tokens * 0.7)
    parts = [MARKER]
    if previous:
        parts.append(f"[summary of everything before]\n{previous}")
    parts.extend(_line(entry, elided_through) for entry in entries)
    parts.append(MARKER.replace("<", "</"))
    return [
        {"role": "system", "content": INSTRUCTIONS.format(words=words)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


REQUEST_TOKENS = 300  # the instructions and the markers of a summary request


def line_tokens(entry: Entry, elided_through: int = 0) -> int:
    """The estimate of what a summary request holds of `entry`."""
    return text_tokens(_line(entry, elided_through)) + MESSAGE_TOKENS


def _line(entry: Entry, elided_through: int) -> str:
    if entry.role == "tool":
        status = " (error)" if entry.is_error else ""
        heading = f"[result of {entry.tool_name} call {entry.tool_call_id}{status}]"
        limit = ELIDED_CHARS if entry.seq <= elided_through else MESSAGE_CHARS
        return f"{heading}\n{_cut(entry.content, limit)}"
    text = _cut(entry.content)
    calls = "".join(
        f"\n[calls {call.name} {call.id} with {_cut(call.arguments, 500)}]"
        for call in entry.tool_calls
    )
    return f"[{entry.role} #{entry.seq}]\n{text}{calls}".rstrip()


def _cut(text: str | None, limit: int = MESSAGE_CHARS) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit:,} more characters]"


def summary_text(reply: str | None) -> str | None:
    """The summary from the model's answer, or None when it wrote nothing."""
    text = (reply or "").strip()
    return text or None


__all__ = [
    "EMPTY_SUMMARY_ERROR",
    "MARKER",
    "REQUEST_TOKENS",
    "line_tokens",
    "request_messages",
    "summary_text",
]
