"""What travels on the live channel: reply deltas, discarded partials, commit notices, and how
each is written as a flat map of strings (a Redis Stream entry's fields).

A model call attempt is a `stream` (a short random token). Its deltas are numbered 0, 1, 2, ...
(`index`) and each names the message seq the reply will be committed under, so a reader knows
where a delta belongs, skips what it has seen, and notices a gap. Pure: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TEXT = "text"
CALL = "call"
ANY_STREAM = "*"  # a `Discarded` for every stream of its message (a resumed turn's first word)
RESUMED = "the turn resumed after its worker stopped"  # why a dead worker's partial is dropped


@dataclass(frozen=True)
class Fragment:
    """A piece of the reply: text, or the arguments of tool call `index` as they form.

    `offset` is where `text` starts within its part (the message's text, or that call's
    arguments). The first fragment of a call names it (`call_id`, `name`)."""

    part: str  # TEXT | CALL
    index: int  # the tool call's position in the reply (0 for text)
    offset: int
    text: str
    call_id: str | None = None
    name: str | None = None

    @property
    def end(self) -> int:
        return self.offset + len(self.text)


@dataclass(frozen=True)
class Delta:
    """One coalesced entry of a reply as it forms: the `index`-th of model call `stream`, for the
    message that will be committed as `message_seq`."""

    message_seq: int
    stream: str
    index: int
    fragments: tuple[Fragment, ...]
    attempt: int = 0  # the call's attempt in its worker's claim (0, then 1, 2 after retries)

    @property
    def text(self) -> str:
        """The text this delta adds to the message (tool-call arguments excluded)."""
        return "".join(f.text for f in self.fragments if f.part == TEXT)


@dataclass(frozen=True)
class Discarded:
    """Drop the partial reply of `stream`: the call was abandoned (retried, cancelled, failed,
    or its worker died) and will not be committed as it stood."""

    message_seq: int
    stream: str
    reason: str

    def drops(self, message_seq: int, stream: str) -> bool:
        """Whether it drops the partial reply of `stream` for message `message_seq`."""
        return self.message_seq == message_seq and self.stream in (stream, ANY_STREAM)


@dataclass(frozen=True)
class CommitNotice:
    """The conversation's event log has grown to `seq` (0: it has, read it to know how far)."""

    seq: int


LiveEntry = Delta | Discarded | CommitNotice


def coalesce(fragments: Iterable[Fragment]) -> tuple[Fragment, ...]:
    """Adjacent fragments of the same part joined into one, in order."""
    merged: list[Fragment] = []
    for fragment in fragments:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.part == fragment.part
            and last.index == fragment.index
            and last.end == fragment.offset
            and fragment.call_id is None
        ):
            merged[-1] = Fragment(
                last.part,
                last.index,
                last.offset,
                last.text + fragment.text,
                last.call_id,
                last.name,
            )
        else:
            merged.append(fragment)
    return tuple(merged)


# --- the wire form ------------------------------------------------------------------------------


def encode(entry: LiveEntry) -> dict[str, str]:
    """A flat map of strings (Redis Stream fields)."""
    match entry:
        case Delta(message_seq, stream, index, fragments, attempt):
            parts = [[f.part, f.index, f.offset, f.text, f.call_id, f.name] for f in fragments]
            fields = {
                "k": "delta",
                "m": str(message_seq),
                "s": stream,
                "n": str(index),
                "f": json.dumps(parts, separators=(",", ":"), ensure_ascii=False),
            }
            if attempt:
                fields["a"] = str(attempt)
            return fields
        case Discarded(message_seq, stream, reason):
            return {"k": "discarded", "m": str(message_seq), "s": stream, "r": reason}
        case CommitNotice(seq):
            return {"k": "committed", "q": str(seq)}
    raise TypeError(f"not a live entry: {entry!r}")  # pragma: no cover


def decode(fields: Mapping[str, str]) -> LiveEntry | None:
    """The entry a map of fields holds; None for one this version does not know (skipped)."""
    try:
        kind = fields["k"]
        if kind == "delta":
            fragments = tuple(
                Fragment(str(p), int(i), int(o), str(t), c, n)
                for p, i, o, t, c, n in json.loads(fields["f"])
            )
            attempt = int(fields.get("a", 0))
            return Delta(int(fields["m"]), fields["s"], int(fields["n"]), fragments, attempt)
        if kind == "discarded":
            return Discarded(int(fields["m"]), fields["s"], fields.get("r", ""))
        if kind == "committed":
            return CommitNotice(int(fields["q"]))
    except (KeyError, ValueError, TypeError):
        return None
    return None


__all__ = [
    "ANY_STREAM",
    "CALL",
    "RESUMED",
    "TEXT",
    "CommitNotice",
    "Delta",
    "Discarded",
    "Fragment",
    "LiveEntry",
    "coalesce",
    "decode",
    "encode",
]
