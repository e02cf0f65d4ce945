"""A turn's in-memory transcript and the chat-completions messages it becomes, kept up to date as
entries are appended: each entry is converted once, so a step never re-reads the whole history.

Every assistant tool call is answered, in call order, right after its message: by the result that
follows it in the transcript, or by a synthetic error when none came (a turn that failed midway).
Results answering no call of the message they follow are dropped, so providers never reject it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from app.worker.plan import Entry, ToolCall

INTERRUPTED_RESULT = "Error: this tool call was interrupted and has no result."

Message = dict[str, Any]


class Transcript(Sequence[Entry]):
    """The committed entries of a conversation, plus their provider messages and call ids."""

    def __init__(self, instructions: str | None, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self._settled: list[Message] = []  # messages no later entry can change
        self._asking: Entry | None = None  # an assistant message whose calls may still be answered
        self._asked: set[str] = set()  # the ids of its calls
        self._answers: dict[str, Entry] = {}
        self.call_ids: set[str] = set()  # every tool call id used so far
        if instructions:
            self._settled.append({"role": "system", "content": instructions})
        for entry in entries:
            self.append(entry)

    def append(self, entry: Entry) -> None:
        # Called once per history message at every claim: kept lean (1,000 entries ~1 ms).
        self._entries.append(entry)
        role = entry.role
        if role == "tool":
            if entry.tool_call_id in self._asked:
                self._answers.setdefault(entry.tool_call_id or "", entry)
            return
        if self._asking is not None:
            self._settle()
        if entry.tool_calls:
            self._asking = entry
            self._asked = {call.id for call in entry.tool_calls}
            self.call_ids |= self._asked
        elif role == "assistant":
            self._settled.append({"role": "assistant", "content": entry.content})
        else:
            self._settled.append({"role": role, "content": entry.content or ""})

    def provider_messages(self) -> list[Message]:
        """A new list (the caller may keep it); the message dicts are shared, do not mutate."""
        return self._settled + self._open_block()

    def _settle(self) -> None:
        self._settled += self._open_block()
        self._asking, self._asked, self._answers = None, set(), {}

    def _open_block(self) -> list[Message]:
        if self._asking is None:
            return []
        answers = self._answers
        return [
            _assistant_message(self._asking),
            *(_result_message(call, answers.get(call.id)) for call in self._asking.tool_calls),
        ]

    def __getitem__(self, index: Any) -> Any:
        return self._entries[index]

    def __len__(self) -> int:
        return len(self._entries)


def provider_messages(instructions: str | None, transcript: Iterable[Entry]) -> list[Message]:
    """Chat-completions messages for a whole transcript (see the module's rules)."""
    return Transcript(instructions, transcript).provider_messages()


def _assistant_message(entry: Entry) -> Message:
    message: Message = {"role": "assistant", "content": entry.content}
    if entry.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _sendable_arguments(call.arguments)},
            }
            for call in entry.tool_calls
        ]
    return message


def _result_message(call: ToolCall, result: Entry | None) -> Message:
    content = INTERRUPTED_RESULT if result is None else (result.content or "")
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def _sendable_arguments(arguments: str) -> str:
    # Providers re-parse the history's arguments: some reject invalid JSON, and Anthropic rejects
    # a tool_use `input` that is not an object (`[1, 2]`, `"x"`, `3`, `null`). The tool result
    # already told the model what was wrong with them; the database keeps what the model said.
    # Runs for every historical call at each claim: a non-object is refused before parsing.
    if not arguments.lstrip().startswith("{"):
        return "{}"
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments if isinstance(parsed, dict) else "{}"


__all__ = ["INTERRUPTED_RESULT", "Transcript", "provider_messages"]
