"""A turn's in-memory transcript: the committed entries, the chat-completions messages they become
(`messages.Messages`, kept up to date as entries are appended), and the size of what is sent.

What is sent follows the conversation's latest compaction (`context.Compacted`); the entries
themselves (what the planner reads) stay whole. The transcript keeps the size of what it sends,
entry by entry, for the context budget (`size`): appending stays O(1), and so does the estimate.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from app.worker.context import (
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
from app.worker.messages import SUMMARY_HEADING, Message, Messages
from app.worker.plan import Entry
from app.worker.summary import REQUEST_TOKENS, line_tokens

ENTRY_BYTES = 600  # an entry, its message dict and its sums, measured with tracemalloc
# What an output cut at the context cap, or elided, tells the model to call to read it whole.
CACHE_REFERENCE = "session_cache_get"


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
        self.call_ids: set[str] = set()  # every tool call id used so far
        self.has_files = False  # a message carries files: requests name them (`files.resolve`)
        self.tools_tokens = 0  # the estimate of the tool definitions the requests carry
        # (the provider's prompt tokens, our estimate) of the last request sent
        self._measured: tuple[int, int] | None = None
        # What is sent refers to the session cache (an output cut short or elided, a summary):
        # only then are its readers worth offering.
        self.refers_to_cache = bool(compacted.elided_through or compacted.summarized_through)
        self._start(entries, Messages(instructions, compacted, unkept))

    def _start(self, entries: Iterable[Entry], messages: Messages) -> None:
        self._messages = messages
        self._entries: list[Entry] = []
        self._seqs: list[int] = []
        self._users: list[int] = []  # the indexes of the user messages
        self._prefix: list[int] = [0]  # tokens sent for entries[:i] (0 for summarised ones)
        self._savings: list[int] = [0]  # tokens an elision would save of entries[:i]
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
        if index and self._seqs[index - 1] <= through and entry.role != "user" and self._users:
            # a summary that ends inside a turn: its user message is still sent, first after it
            self._messages.pin(self._entries[self._users[-1]])
        tokens, saving = self._messages.add(entry)
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
            and self._messages.unkept == unkept
            and self.compacted == compacted
        )

    def __getitem__(self, index: Any) -> Any:
        return self._entries[index]

    def __len__(self) -> int:
        return len(self._entries)

    # --- the messages sent ----------------------------------------------------------------------

    def provider_messages(self) -> list[Message]:
        """A new list (the caller may keep it); the message dicts are shared, do not mutate."""
        return self._messages.sent()

    def compact(self, compacted: Compacted) -> None:
        """From now on, send what `compacted` says (a committed compaction): rebuilt once."""
        self.compacted = compacted
        self.refers_to_cache = True
        self._measured = None
        self.call_ids = set()
        messages = Messages(self.instructions, compacted, self._messages.unkept)
        self._start(self._entries, messages)

    # --- the context budget -----------------------------------------------------------------------

    def observe(self, prompt_tokens: int) -> None:
        """The provider counted `prompt_tokens` for the request just sent: the next estimate
        starts from that count."""
        if prompt_tokens > 0:
            self._measured = (prompt_tokens, self._estimated())

    def _estimated(self) -> int:
        messages = self._messages
        return messages.fixed + messages.pinned + self._prefix[-1] + self.tools_tokens

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


def provider_messages(instructions: str | None, transcript: Iterable[Entry]) -> list[Message]:
    """Chat-completions messages for a whole transcript (see `messages.py`'s rules)."""
    return Transcript(instructions, transcript).provider_messages()


__all__ = ["Transcript", "provider_messages"]
