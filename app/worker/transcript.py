"""A turn's in-memory transcript and the chat-completions messages it becomes, kept up to date as
entries are appended: each entry is converted once, so a step never re-reads the whole history.

An answer that missed its turn's JSON Schema (`Entry.refusal`) is followed by what the model was
told then (`structured.repair_prompt`): the request reads as the conversation went.

Every assistant tool call is answered, in call order, right after its message: by the result that
follows it in the transcript, or by a synthetic error when none came (a turn that failed midway).
Results answering no call of the message they follow are dropped, so providers never reject it.

What is sent follows the conversation's latest compaction (`context.Compacted`): the messages a
summary replaced are left out (the summary goes into the system message, and the current turn's
own user message is always sent, first after it), and the tool outputs up to `elided_through`
go as a reference the model can read them back by. The entries themselves (what the planner
reads) stay whole. The transcript also keeps the size of what it sends, entry by entry, for the
context budget (`size`): appending stays O(1), and so does the estimate.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from app.worker.context import (
    CALL_TOKENS,
    ELIDE_MIN_CHARS,
    MESSAGE_TOKENS,
    NOT_COMPACTED,
    Compacted,
    Policy,
    Size,
    keep_target,
    summary_input_tokens,
    summary_tokens,
    text_tokens,
)
from app.worker.files import parts as file_parts
from app.worker.files import tokens as file_tokens
from app.worker.files import tool_media
from app.worker.plan import Entry, ToolCall
from app.worker.structured import repair_prompt
from app.worker.summary import REQUEST_TOKENS, line_tokens

INTERRUPTED_RESULT = "Error: this tool call was interrupted and has no result."
ENTRY_BYTES = 600  # an entry, its message dict and its sums, measured with tracemalloc
# What an output cut at the context cap, or elided, tells the model to call to read it whole.
CACHE_REFERENCE = "session_cache_get"
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


class Transcript(Sequence[Entry]):
    """The committed entries of a conversation, plus their provider messages and call ids."""

    def __init__(
        self,
        instructions: str | None,
        entries: Iterable[Entry] = (),
        compacted: Compacted = NOT_COMPACTED,
        unkept: Iterable[str] = (),
    ) -> None:
        self.instructions = instructions
        self.compacted = compacted
        # Tools whose outputs the session cache does not keep (never elided): the worker's own,
        # and the web app's client tools.
        self._unkept = frozenset(unkept)
        self._entries: list[Entry] = []
        self._seqs: list[int] = []
        self._users: list[int] = []  # the indexes of the user messages
        self._prefix: list[int] = [0]  # tokens sent for entries[:i] (0 for summarised ones)
        self._savings: list[int] = [0]  # tokens an elision would save of entries[:i]
        self.call_ids: set[str] = set()  # every tool call id used so far
        self.has_files = False  # a message carries files: requests name them (`files.resolve`)
        self.tools_tokens = 0  # the estimate of the tool definitions the requests carry
        # (the provider's prompt tokens, our estimate) of the last request sent
        self._measured: tuple[int, int] | None = None
        # What is sent refers to the session cache (an output cut short or elided, a summary):
        # only then are its readers worth offering.
        self.refers_to_cache = bool(compacted.elided_through or compacted.summarized_through)
        self._reset_messages()
        for entry in entries:
            self.append(entry)

    # --- entries ------------------------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        # Called once per history message at every claim: kept lean (1,000 entries ~1 ms).
        index = len(self._entries)
        self._entries.append(entry)
        self._seqs.append(entry.seq)
        if entry.role == "user":
            self._users.append(index)
        if entry.files:
            self.has_files = True
        if entry.tool_calls:
            self.call_ids.update(call.id for call in entry.tool_calls)
        elif entry.role == "tool" and not self.refers_to_cache:
            self.refers_to_cache = CACHE_REFERENCE in (entry.content or "")
        through = self.compacted.summarized_through
        if entry.seq <= through:
            self._prefix.append(self._prefix[-1])
            self._savings.append(self._savings[-1])
            return
        if index and self._seqs[index - 1] <= through and entry.role != "user":
            self._pin_turn_message()
        tokens, saving = self._add_message(entry)
        self._prefix.append(self._prefix[-1] + tokens)
        self._savings.append(self._savings[-1] + saving)

    def weight(self) -> int:
        """About how many bytes this transcript holds: its entries and their text (4 bytes a
        token of the estimate), for `history.Histories`' limit."""
        return ENTRY_BYTES * len(self._entries) + 4 * self._prefix[-1]

    def same_setup(self, instructions: str | None, compacted: Compacted, unkept: set[str]) -> bool:
        """Whether this transcript was built for the same conversation as committed now: its
        instructions, client tools and latest compaction (a kept transcript is checked)."""
        return (
            self.instructions == instructions
            and self._unkept == unkept
            and self.compacted == compacted
        )

    def __getitem__(self, index: Any) -> Any:
        return self._entries[index]

    def __len__(self) -> int:
        return len(self._entries)

    # --- the messages sent ----------------------------------------------------------------------

    def provider_messages(self) -> list[Message]:
        """A new list (the caller may keep it); the message dicts are shared, do not mutate."""
        return self._settled + self._open_block()

    def compact(self, compacted: Compacted) -> None:
        """From now on, send what `compacted` says (a committed compaction): rebuilt once."""
        self.compacted = compacted
        self.refers_to_cache = True
        self._measured = None
        entries = self._entries
        self._entries, self._seqs, self._users = [], [], []
        self._prefix, self._savings = [0], [0]
        self.call_ids = set()
        self._reset_messages()
        for entry in entries:
            self.append(entry)

    def _reset_messages(self) -> None:
        self._settled: list[Message] = []  # messages no later entry can change
        self._asking: Entry | None = None  # an assistant message whose calls may still be answered
        self._asked: set[str] = set()  # the ids of its calls
        self._answers: dict[str, Entry] = {}
        self._pinned = 0  # tokens of the current turn's message, sent though summarised
        system = self._system_text()
        self._fixed = text_tokens(system) + MESSAGE_TOKENS if system else 0
        if system:
            self._settled.append({"role": "system", "content": system})

    def _system_text(self) -> str | None:
        summary = self.compacted.summary
        if summary is None:
            return self.instructions
        heading = SUMMARY_HEADING.format(through=self.compacted.summarized_through)
        parts = [self.instructions, f"{heading}\n{summary}"]
        return "\n\n".join(part for part in parts if part)

    def _add_message(self, entry: Entry) -> tuple[int, int]:
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

    def _pin_turn_message(self) -> None:
        """A summary that ends inside a turn still sends that turn's user message, first after
        it: the messages kept go on from the middle of the turn it asked for."""
        if self._users:
            content = self._entries[self._users[-1]].content or ""
            self._settled.append({"role": "user", "content": content})
            self._pinned = text_tokens(content) + MESSAGE_TOKENS

    def _elidable_output(self, entry: Entry) -> bool:
        """An output long enough to be worth a reference, of a tool the cache keeps."""
        return len(entry.content or "") > ELIDE_MIN_CHARS and entry.tool_name not in self._unkept

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

    # --- the context budget -----------------------------------------------------------------------

    def observe(self, prompt_tokens: int) -> None:
        """The provider counted `prompt_tokens` for the request just sent: the next estimate
        starts from that count."""
        if prompt_tokens > 0:
            self._measured = (prompt_tokens, self._estimated())

    def _estimated(self) -> int:
        return self._fixed + self._pinned + self._prefix[-1] + self.tools_tokens

    def estimate(self, *, measured: bool = True) -> int:
        """The next request's size in tokens (O(1)): from the provider's count of the last
        request when there is one (`measured`), else the estimate alone (what a compaction's
        sizes are compared in)."""
        estimated = self._estimated()
        if self._measured is None or not measured:
            return estimated
        counted, then = self._measured
        return counted + max(0, estimated - then)

    def size(self, rules: Policy, overflowed: bool = False) -> Size:
        """What the decision needs (`context.decide`); the parts past the estimate are worked
        out only when the request is over the trigger or overflowed."""
        tokens = self.estimate()
        unbounded = rules.window is None or not rules.compaction  # (rows 19 and 25 need no more)
        if not overflowed and (unbounded or tokens <= rules.trigger):
            return Size(tokens, 0, 0, None, tokens)
        turn = self._users[-1] if self._users else len(self._entries)
        elidable, elide_through = self._elidable(turn)
        target = keep_target(rules, tokens)
        raw = self.estimate(measured=False)
        cut, kept = self._cut(turn, target, summary_input_tokens(rules), raw, summary_tokens(rules))
        return Size(tokens, elidable, elide_through, cut, kept)

    def _elidable(self, turn: int) -> tuple[int, int]:
        """Tokens saved by eliding the outputs of the turns before entry `turn`, and through
        (O(1): each entry's saving was worked out as it was appended)."""
        if turn == 0:
            return 0, 0
        return self._savings[turn], self._entries[turn - 1].seq

    def _cut(
        self, turn: int, target: int, most: int, tokens: int, allowance: int
    ) -> tuple[tuple[int, int] | None, int]:
        """The range a summary would replace: the fewest oldest messages that bring the request
        under `target` tokens, reading at most `most` tokens; None when none can go."""
        entries = self._entries
        start = bisect.bisect_right(self._seqs, self.compacted.summarized_through)
        last = self._last_kept(turn)
        users = bisect.bisect_right(self._users, start), bisect.bisect_right(self._users, last)
        # In order (every user message is at or before the turn's), and read lazily: only as
        # far as a summary request can read.
        candidates = itertools.chain(
            (self._users[k] for k in range(*users)),
            (
                i
                for i in range(max(turn + 1, start + 1), last + 1)
                if entries[i].role == "assistant"
            ),
        )
        fixed = text_tokens(self.instructions) + text_tokens(SUMMARY_HEADING) + MESSAGE_TOKENS
        fixed += allowance + self.tools_tokens
        turn_tokens = text_tokens(entries[turn].content) if turn < len(entries) else 0

        def after(i: int) -> int:
            pinned = turn_tokens + MESSAGE_TOKENS if i > turn else 0
            return fixed + pinned + self._prefix[-1] - self._prefix[i]

        readable = self._readable(start, candidates, most)
        if not readable:
            return None, tokens
        chosen = next((i for i in readable if after(i) <= target), readable[-1])
        if after(chosen) >= tokens:  # a summary must save room
            return None, tokens
        return (entries[start].seq, entries[chosen - 1].seq), after(chosen)

    def _readable(self, start: int, candidates: Iterable[int], most: int) -> list[int]:
        """The candidates whose range (from `start`) a summary request can read: what it is
        sent of each message (`summary.line_tokens`), with the summary before, under `most`."""
        budget = most - text_tokens(self.compacted.summary) - REQUEST_TOKENS
        readable, read, index = [], 0, start
        for candidate in candidates:
            while index < candidate:
                read += line_tokens(self._entries[index], self.compacted.elided_through)
                index += 1
            if read > budget:
                break
            readable.append(candidate)
        return readable

    def _last_kept(self, turn: int) -> int:
        """The index of the first entry a summary must keep: the current turn's last assistant
        message (its calls and their results stay whole), or the turn's user message."""
        for index in range(len(self._entries) - 1, turn, -1):
            if self._entries[index].role == "assistant":
                return index
        return turn

    def between(self, from_seq: int, through: int) -> list[Entry]:
        """The entries `from_seq..through` (what a summary replaces)."""
        start = bisect.bisect_left(self._seqs, from_seq)
        end = bisect.bisect_right(self._seqs, through)
        return self._entries[start:end]


def _reference(entry: Entry) -> str:
    """What is sent of an elided output."""
    content = entry.content or ""
    return ELIDED_OUTPUT.format(
        chars=len(content), tool=entry.tool_name or "tool", call_id=entry.tool_call_id
    )


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


__all__ = [
    "ELIDED_OUTPUT",
    "INTERRUPTED_RESULT",
    "SUMMARY_HEADING",
    "Transcript",
    "provider_messages",
]
