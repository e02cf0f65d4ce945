"""The chat-completions messages a transcript becomes, built entry by entry: each entry is
converted once, so a step never re-reads the whole history.

An answer that missed its turn's JSON Schema (`Entry.refusal`) is followed by what the model was
told then (`structured.repair_prompt`): the request reads as the conversation went.

Every assistant tool call is answered, in call order, right after its message: by the result that
follows it in the transcript, or by a synthetic error when none came (a turn that failed midway).
Results answering no call of the message they follow are dropped, so providers never reject it.

What is sent follows the conversation's latest compaction (`context.Compacted`): the messages a
summary replaced are left out (the summary goes into the system message, and the current turn's
own user message is always sent, first after it), and the tool outputs up to `elided_through`
go as a reference the model can read them back by.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from app.worker.context import (
    CALL_TOKENS,
    ELIDE_MIN_CHARS,
    MESSAGE_TOKENS,
    Compacted,
    text_tokens,
)
from app.worker.entry import Entry, ToolCall
from app.worker.files import parts as file_parts
from app.worker.files import tokens as file_tokens
from app.worker.files import tool_media
from app.worker.structured import repair_prompt

INTERRUPTED_RESULT = "Error: this tool call was interrupted and has no result."
SUMMARY_HEADING = (
    "Summary of the earlier part of this conversation (messages 1-{through}, compacted to fit "
    "the model's context; the transcript itself is kept whole):"
)
ELIDED_OUTPUT = (
    "[The {chars:,} characters of this {tool} output were taken out of the context to save "
    'room. The whole output is kept: call session_cache_get with {{"id": "{call_id}"}} to read '
    "it.]"
)

Message = dict[str, Any]


class Messages:
    """The messages sent for the entries added so far, under one compaction; with the tokens
    each entry adds to the request, and those an elision of it would save."""

    def __init__(
        self, instructions: str | None, compacted: Compacted, unkept: Iterable[str] = ()
    ) -> None:
        self.instructions = instructions
        self.compacted = compacted
        # Tools whose outputs the session cache does not keep (never elided): the worker's own,
        # and the web app's client tools.
        self.unkept = frozenset(unkept)
        self._settled: list[Message] = []  # messages no later entry can change
        self._asking: Entry | None = None  # an assistant message whose calls may still be answered
        self._asked: set[str] = set()  # the ids of its calls
        self._answers: dict[str, Entry] = {}
        self.pinned = 0  # tokens of the current turn's message, sent though summarised
        system = self._system_text()
        self.fixed = text_tokens(system) + MESSAGE_TOKENS if system else 0
        if system:
            self._settled.append({"role": "system", "content": system})

    def sent(self) -> list[Message]:
        """A new list (the caller may keep it); the message dicts are shared, do not mutate."""
        return self._settled + self._open_block()

    def _system_text(self) -> str | None:
        summary = self.compacted.summary
        if summary is None:
            return self.instructions
        heading = SUMMARY_HEADING.format(through=self.compacted.summarized_through)
        parts = [self.instructions, f"{heading}\n{summary}"]
        return "\n\n".join(part for part in parts if part)

    def add(self, entry: Entry) -> tuple[int, int]:
        """Turn `entry` into its provider message(s); the tokens it adds to the request, and
        those an elision of it would save."""
        role = entry.role
        if role == "tool":
            if entry.tool_call_id in self._asked:
                self._answers.setdefault(entry.tool_call_id or "", entry)
            tokens, saving = self._tool_tokens(entry)
            if entry.files:
                return tokens + file_tokens(entry.files) + 2 * MESSAGE_TOKENS, saving
            return tokens + MESSAGE_TOKENS, saving
        if self._asking is not None:
            self._settle()
        if entry.tool_calls:
            self._asking = entry
            self._asked = {call.id for call in entry.tool_calls}
            arguments = sum(
                text_tokens(c.name) + text_tokens(c.arguments) + CALL_TOKENS
                for c in entry.tool_calls
            )
            return text_tokens(entry.content) + arguments + MESSAGE_TOKENS, 0
        if role == "assistant":
            self._settled.append({"role": "assistant", "content": entry.content})
            if entry.refusal is not None:  # it missed the turn's schema: what it was told then
                repair = repair_prompt(entry.refusal)
                self._settled.append({"role": "user", "content": repair})
                return text_tokens(entry.content) + text_tokens(repair) + 2 * MESSAGE_TOKENS, 0
        elif entry.files:  # a user message's files: parts naming them (`files.resolve`)
            content = file_parts(entry.content, entry.files)
            self._settled.append({"role": role, "content": content})
            return text_tokens(entry.content) + file_tokens(entry.files) + MESSAGE_TOKENS, 0
        else:
            self._settled.append({"role": role, "content": entry.content or ""})
        return text_tokens(entry.content) + MESSAGE_TOKENS, 0

    def pin(self, user: Entry) -> None:
        """A summary that ends inside a turn still sends that turn's user message, first after
        it: the messages kept go on from the middle of the turn it asked for."""
        content = user.content or ""
        self._settled.append({"role": "user", "content": content})
        self.pinned = text_tokens(content) + MESSAGE_TOKENS

    def _elidable_output(self, entry: Entry) -> bool:
        """An output long enough to be worth a reference, of a tool the cache keeps."""
        return len(entry.content or "") > ELIDE_MIN_CHARS and entry.tool_name not in self.unkept

    def _tool_content(self, entry: Entry) -> str:
        if entry.seq <= self.compacted.elided_through and self._elidable_output(entry):
            return _reference(entry)
        return entry.content or ""

    def _tool_tokens(self, entry: Entry) -> tuple[int, int]:
        """The tokens of a tool result as sent, and those eliding it would save."""
        if not self._elidable_output(entry):
            return text_tokens(entry.content), 0
        reference = text_tokens(_reference(entry))
        if entry.seq <= self.compacted.elided_through:
            return reference, 0
        whole = text_tokens(entry.content)
        return whole, max(0, whole - reference)

    def _settle(self) -> None:
        self._settled += self._open_block()
        self._asking, self._asked, self._answers = None, set(), {}

    def _open_block(self) -> list[Message]:
        if self._asking is None:
            return []
        answers = self._answers
        block = [
            _assistant_message(self._asking),
            *(
                _result_message(call, self._answer_text(answers.get(call.id)))
                for call in self._asking.tool_calls
            ),
        ]
        # the images and PDFs the results returned (an elided result's are left out with it)
        shown = [
            file
            for call in self._asking.tool_calls
            if (result := answers.get(call.id)) is not None
            and result.seq > self.compacted.elided_through
            for file in result.files
        ]
        media = tool_media(shown) if shown else None
        return block if media is None else [*block, media]

    def _answer_text(self, result: Entry | None) -> str:
        return INTERRUPTED_RESULT if result is None else self._tool_content(result)


def _reference(entry: Entry) -> str:
    """What is sent of an elided output."""
    content = entry.content or ""
    return ELIDED_OUTPUT.format(
        chars=len(content), tool=entry.tool_name or "tool", call_id=entry.tool_call_id
    )


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


def _result_message(call: ToolCall, content: str) -> Message:
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
    except (ValueError, RecursionError):  # (nested past the parser's limit: not sendable)
        return "{}"
    return arguments if isinstance(parsed, dict) else "{}"


__all__ = ["ELIDED_OUTPUT", "INTERRUPTED_RESULT", "SUMMARY_HEADING", "Message", "Messages"]
