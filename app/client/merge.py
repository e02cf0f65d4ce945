"""Following a conversation, decided without I/O: the committed events and the live entries
merged into one sequence a reader shows, and the cursor it resumes from.

    input                                       what the reader gets
    ------------------------------------------  --------------------------------------------------
    a committed event after the cursor          the event (each seq once, in order); a
                                                `message.committed` replaces the partial of its
                                                message; `turn.resumed` and a turn's end first
                                                drop any partial still shown (`Discarded`)
    a delta of a message not yet committed      the delta, if it is the next of its stream; the
                                                first delta of a stream only from index 0 (a
                                                reader that joined mid-reply waits for the commit)
    a delta already shown, or of a committed    nothing
    message
    a delta after a gap (entries were lost)     `Discarded` for what was shown; the rest of that
                                                stream is ignored until its message commits
    a delta of a new stream for a message       `Discarded` for the old stream, then the new one
    whose partial is shown                      from index 0 (a retried or resumed call)
    `Discarded` for a shown stream              `Discarded`
    a delta of a stream the same read also      nothing (a reader catching up on the retained
    finds discarded or replaced                 entries skips attempts that are already void)
    the conversation found at rest (a whole     `Discarded` for any partial still shown: no
    read of the log saw it idle or failed)      reply forms at rest, so one still shown is
                                                dead and its end was lost with the channel
    a delta while at rest, before the log has   nothing: a dead reply's (a run's deltas follow
    news                                        its claim's notice, which sends the reader to
                                                the log first)

A reader that stops after any item and resumes from `cursor` gets exactly the items an
uninterrupted reader got after that point (the live part as far as the channel still holds it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.errors import InvalidCursor
from app.live import ANY_STREAM, RESUMED, CommitNotice, Delta, Discarded, LiveEntry
from app.models import MESSAGE_COMMITTED, TERMINAL_EVENTS, TURN_RESUMED

ENDED = "the turn ended"
GAP = "part of the live stream was lost"
RESTARTED = "the model call started over"


@dataclass(frozen=True)
class Cursor:
    """Where a reader stands: after committed event `after`, and, while a reply forms, after
    delta `index` of `stream` for message `message_seq`.

    Its text form is `"12"` or `"12:5:8f3a2c1d:7"`."""

    after: int = 0
    message_seq: int | None = None
    stream: str | None = None
    index: int | None = None

    def __str__(self) -> str:
        if self.message_seq is None:
            return str(self.after)
        return f"{self.after}:{self.message_seq}:{self.stream}:{self.index}"

    @classmethod
    def parse(cls, value: Cursor | int | str) -> Cursor:
        """A cursor from its text form (or an event seq); `InvalidCursor` for anything else."""
        if isinstance(value, Cursor):
            return value
        if isinstance(value, bool):
            raise InvalidCursor(f"a cursor is an event seq or its text form, not {value!r}")
        try:
            if isinstance(value, int):
                return cls._checked(value)
            parts = str(value).split(":")
            if len(parts) == 1:
                return cls._checked(int(parts[0]))
            after, message_seq, stream, index = parts
            if not stream or int(message_seq) < 1 or int(index) < 0:
                raise ValueError(value)
            return cls(cls._checked(int(after)).after, int(message_seq), stream, int(index))
        except ValueError:
            raise InvalidCursor(
                f"cursor {value!r} is not an event seq >= 0 or 'seq:message:stream:index'"
            ) from None

    @classmethod
    def _checked(cls, after: int) -> Cursor:
        if after < 0:
            raise ValueError(after)
        return cls(after)


Handed = tuple[Any, Cursor]  # an item, and the cursor right after it


@dataclass
class LiveMerge:
    """The state of one reader of one conversation. Every item it hands out comes with the
    cursor that resumes right after it."""

    after: int = 0  # the last committed event handed out
    committed_up_to: int = 0  # messages up to this seq are committed: their deltas are stale
    shown: dict[int, tuple[str, int]] = field(default_factory=dict)  # message -> (stream, index)
    blocked: set[tuple[int, str]] = field(default_factory=set)  # streams this reader cannot show
    resting: bool = False  # the log's last whole read found the conversation at rest

    @classmethod
    def starting_at(cls, cursor: Cursor) -> LiveMerge:
        merge = cls(after=cursor.after)
        if cursor.message_seq is not None and cursor.stream and cursor.index is not None:
            merge.shown[cursor.message_seq] = (cursor.stream, cursor.index)
        return merge

    @property
    def cursor(self) -> Cursor:
        if not self.shown:
            return Cursor(self.after)
        message_seq = max(self.shown)
        stream, index = self.shown[message_seq]
        return Cursor(self.after, message_seq, stream, index)

    def committed(self, events: list[Any], last_message_seq: int = 0) -> list[Handed]:
        """Committed events (oldest first, with `.seq`, `.type`, `.message_seq`), and the
        conversation's last message seq as the read that found them saw it."""
        out: list[Handed] = []
        for event in events:
            if event.seq <= self.after:
                continue
            self.resting = False
            if event.type == TURN_RESUMED:
                self._drop_all(RESUMED, out)
            elif event.type in TERMINAL_EVENTS:
                self._drop_all(ENDED, out)
            self.after = event.seq
            if event.type == MESSAGE_COMMITTED and event.message_seq is not None:
                self._settle(event.message_seq)
            out.append((event, self.cursor))
        self._settle(last_message_seq)
        return out

    def rested(self) -> list[Handed]:
        """The log, read up to `after`, found the conversation at rest: nothing is forming, so
        a partial still shown is dropped, and deltas are a dead reply's until the log has news."""
        out: list[Handed] = []
        self._drop_all(ENDED, out)
        self.resting = True
        return out

    def live(self, entries: list[LiveEntry]) -> tuple[list[Handed], bool]:
        """The items these live entries add, and whether the committed log has news to read."""
        out: list[Handed] = []
        news = False
        void = _void_streams(entries)
        starts = {
            (entry.message_seq, entry.stream): position
            for position, entry in enumerate(entries)
            if isinstance(entry, Delta) and entry.index == 0
        }
        for position, entry in enumerate(entries):
            match entry:
                case CommitNotice(seq):
                    news = news or seq == 0 or seq > self.after
                case Delta():
                    self._delta(entry, out, void)
                case Discarded():
                    shown = self.shown.get(entry.message_seq, ("",))[0]
                    begins_later = starts.get((entry.message_seq, shown), -1) > position
                    if not (entry.stream == ANY_STREAM and begins_later):
                        # (a resumed turn's notice does not drop a stream that began after it)
                        self._discarded(entry, out)
        return out, news

    def _delta(self, delta: Delta, out: list[Handed], void: set[tuple[int, str]]) -> None:
        message, stream = delta.message_seq, delta.stream
        if self.resting or message <= self.committed_up_to or (message, stream) in self.blocked:
            return
        if (message, stream) in void and self.shown.get(message, ("",))[0] != stream:
            self.blocked.add((message, stream))  # dropped later in this very read: never show it
            return
        current = self.shown.get(message)
        if current is not None and current[0] == stream:
            if delta.index == current[1] + 1:
                self.shown[message] = (stream, delta.index)
                out.append((delta, self.cursor))
            elif delta.index > current[1] + 1:
                self._drop(message, GAP, out)
            return
        if current is not None:
            self._drop(message, RESTARTED, out)
        if delta.index == 0:
            self.shown[message] = (stream, 0)
            out.append((delta, self.cursor))
        else:
            self.blocked.add((message, stream))

    def _discarded(self, discarded: Discarded, out: list[Handed]) -> None:
        message = discarded.message_seq
        if discarded.stream != ANY_STREAM:
            self.blocked.add((message, discarded.stream))
        current = self.shown.get(message)
        if current is not None and discarded.stream in (current[0], ANY_STREAM):
            self._drop(message, discarded.reason, out)

    def _drop(self, message: int, reason: str, out: list[Handed]) -> None:
        stream, _ = self.shown.pop(message)
        self.blocked.add((message, stream))
        out.append((Discarded(message, stream, reason), self.cursor))

    def _drop_all(self, reason: str, out: list[Handed]) -> None:
        for message in sorted(self.shown):
            self._drop(message, reason, out)

    def _settle(self, message_seq: int) -> None:
        """Messages up to `message_seq` are committed: their partials are replaced, not shown."""
        if message_seq <= self.committed_up_to:
            return
        self.committed_up_to = message_seq
        for stale in [m for m in self.shown if m <= message_seq]:
            del self.shown[stale]


def _void_streams(entries: list[LiveEntry]) -> set[tuple[int, str]]:
    """The streams a read already holds the end of: discarded, or followed by another stream
    of the same message (a reader that catches up on retained entries skips them whole)."""
    void: set[tuple[int, str]] = set()
    latest: dict[int, str] = {}
    seen: dict[int, set[str]] = {}
    for entry in entries:
        if isinstance(entry, Delta):
            message, stream = entry.message_seq, entry.stream
            if latest.get(message, stream) != stream:
                void.add((message, latest[message]))
            latest[message] = stream
            seen.setdefault(message, set()).add(stream)
        elif isinstance(entry, Discarded):
            message = entry.message_seq
            gone = seen.get(message, set()) if entry.stream == ANY_STREAM else {entry.stream}
            void.update((message, stream) for stream in gone)
    return void


__all__ = ["Cursor", "LiveMerge"]
