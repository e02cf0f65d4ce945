"""A response as OpenAI's stream of events, numbered the same on every replay. Pure: the route
feeds it what a follower of the conversation hands out (committed events with their messages,
the reply's live deltas, discards) and writes out what it returns.

    what comes in                        events (sequence_number)
    -----------------------------------  ------------------------------------------------------
    (the start)                          response.created (0)
    the turn claimed for this response   response.in_progress (1)
    a reply's live delta (its text)      output_item.added, content_part.added (a message, the
                                         first time), output_text.delta
    the reply committed                  the text pieces not yet sent, as the live stream split
                                         them (`messages.reply_stream`), output_text.done,
                                         content_part.done, output_item.done
    a worker's tool call committed       output_item.added (mcp_call), mcp_call_arguments
                                         .delta / .done, mcp_call.in_progress
    its result committed                 mcp_call.completed | failed, output_item.done
    the pause (calls for the client,     output_item.added / function_call_arguments.delta /
    approvals asked)                     .done / output_item.done, per item; then the end
    the end (or the pause)               response.completed | failed, or response.incomplete
                                         for a cancelled response (status "cancelled": the SDK
                                         has no response.cancelled event)
    a live reply discarded (a retry,     output_item.done of the partial item, status
    its worker died, ...)                "incomplete" (live only: a replay never shows it)

**Numbering.** Every event but a reply's is numbered one after the other from what is committed,
so a replay a month later gives the same numbers. A reply's block (from its output_item.added
to its output_item.done) starts at `last + 1 + ordinal * ATTEMPT_STRIDE`: its `ordinal` is the
claims of the turn since its last step times 16 plus the call's attempt in its claim (a retry),
so the attempt that is committed is numbered exactly as it was streamed live (its split and
attempt are committed with it), and an attempt that is discarded is numbered below every later
one: a client resuming with `starting_after` from inside a discarded attempt gets the committed
one whole, from its output_item.added, at the same output_index (replace the item you hold).
Numbers rise on every stream; they skip over retried or crashed attempts. The events of each
kind of item are written by `output_events.py`; this module decides which, when, and their numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.api.responses.ids import ResponseId, message_item
from app.api.responses.output_events import (
    Event,
    Numbering,
    mcp_call_added,
    mcp_call_done,
    message_done,
    message_dropped,
    open_message,
    text_delta,
    whole_item,
)
from app.api.responses.translate import Cutter, Tools
from app.client.views import EventView, MessageView, TurnView
from app.live.entries import Delta, Discarded
from app.models import (
    ACTION_REQUIRED,
    MESSAGE_COMMITTED,
    TERMINAL_EVENTS,
    TURN_CANCELLED,
    TURN_FAILED_EVENT,
    TURN_RESUMED,
    TURN_STARTED,
)
from app.vocabulary import LIVE_TYPES, NOTICE_EVENTS

ATTEMPT_STRIDE = 1 << 20  # numbers kept for one attempt of a reply: more deltas than it can have
ATTEMPTS_PER_CLAIM = 16
MAX_BLOCK_EVENTS = ATTEMPT_STRIDE - 8  # a reply streamed past this shows the rest at its commit

# What this dialect shows, and what it passes over on purpose: the notices around a turn
# (`app.vocabulary.NOTICE_EVENTS`) are not a response's business. A test holds both to the
# vocabulary (tests/unit/test_renderer_coverage.py).
HANDLED = frozenset(
    (TURN_STARTED, TURN_RESUMED, MESSAGE_COMMITTED, ACTION_REQUIRED, *TERMINAL_EVENTS, *LIVE_TYPES)
)
SKIPPED = frozenset(NOTICE_EVENTS)


@dataclass
class _LiveReply:
    seq: int
    stream: str
    ordinal: int
    base: int  # the number of its output_item.added
    index: int  # its output_index
    pieces: list[str] = field(default_factory=list)  # the text sent, delta by delta


class ResponseEvents:
    """One response's events; `feed` each item a follower hands out, in order, then `finish`
    with the final response object once `ended`."""

    def __init__(self, response: ResponseId, snapshot: Callable[[str], dict[str, Any]]) -> None:
        """`snapshot(status)`: the response object at the start (fixed: no output, no usage)."""
        self.response = response
        self.turn_id = response.turn_id
        self.snapshot = snapshot
        self._numbering = Numbering()
        self.ended = False
        self.terminal: str | None = None  # the event type that ends it
        self._cutter: Cutter | None = None
        self._claims_since_step = 0
        self._live: _LiveReply | None = None
        self._shown: dict[str, dict[str, Any]] = {}  # item id -> the state shown
        self._started = False
        self._last_seq = 0  # the turn's last committed message
        self.events: list[EventView] = []  # the turn's committed events, as fed
        self.final_turn: TurnView | None = None  # the turn as it ended (its terminal event's)

    def begin(self, turn: TurnView, tools: Tools) -> list[Event]:
        self._cutter = Cutter(turn, tools)
        return [self._numbering.next("response.created", response=self.snapshot("queued"))]

    # --- what comes in ---------------------------------------------------------------------------

    def feed(self, item: EventView | Delta | Discarded) -> list[Event]:
        if self.ended:
            return []
        if isinstance(item, EventView):
            return self._committed(item)
        if isinstance(item, Delta):
            return self._delta(item)
        return self._discarded(item)

    def finish(self, final: dict[str, Any]) -> list[Event]:
        """The last event, with the response as it ended (read after `ended`)."""
        kind = self.terminal or "response.completed"
        return [self._numbering.next(kind, response=final)]

    # --- committed events --------------------------------------------------------------------

    def _committed(self, event: EventView) -> list[Event]:
        if event.turn_id != self.turn_id or self._cutter is None:
            return []
        self.events.append(event)
        cutter = self._cutter
        answering_before = cutter.answering
        before = len(cutter.done_segments)
        cutter.take(event)
        out: list[Event] = []
        if event.type in (TURN_STARTED, TURN_RESUMED):
            if answering_before or event.type == TURN_STARTED:
                self._claims_since_step = 0
            else:
                self._claims_since_step += 1
            if self._mine(cutter) and not self._started:
                self._started = True
                snapshot = self.snapshot("in_progress")
                out.append(self._numbering.next("response.in_progress", response=snapshot))
            return out
        reply_claims = self._claims_since_step
        if event.type == MESSAGE_COMMITTED and event.message is not None:
            if event.message.role == "assistant" or (
                event.message.role == "tool" and not cutter.answering
            ):
                self._claims_since_step = 0  # a step of a worker
            self._last_seq = max(self._last_seq, event.message.seq)
        segment_index = self.response.segment
        if segment_index < before:
            return out  # (a later response's stream: nothing of ours is left)
        segments = cutter.done()
        if segment_index >= len(segments):
            return out
        segment = segments[segment_index]
        if event.type == MESSAGE_COMMITTED and event.message is not None:
            out += self._show(segment.output, event.message, reply_claims)
        if event.type == ACTION_REQUIRED and segment_index == before:
            out += self._show(segment.output, None, reply_claims)
            self._end(None)
        elif event.type in TERMINAL_EVENTS:
            out += self._show(segment.output, None, reply_claims)
            self.final_turn = event.turn
            self._end(event.type)
        return out

    def _mine(self, cutter: Cutter) -> bool:
        return len(cutter.done_segments) == self.response.segment

    def _end(self, event_type: str | None) -> None:
        self.ended = True
        if event_type == TURN_FAILED_EVENT:
            self.terminal = "response.failed"
        elif event_type == TURN_CANCELLED:
            self.terminal = "response.incomplete"
        else:
            self.terminal = "response.completed"

    # --- the output, as committed ------------------------------------------------------------

    def _show(
        self, output: list[dict[str, Any]], message: MessageView | None, claims: int
    ) -> list[Event]:
        """Events for what changed in the response's output since it was last shown (`claims`:
        the turn's claims since its last step when `message` was made)."""
        out: list[Event] = []
        for index, item in enumerate(output):
            shown = self._shown.get(item["id"])
            kind = item["type"]
            if kind == "message":
                if shown is None or not shown.get("done"):
                    out += self._message_block(index, item, message, claims)
            elif kind == "mcp_call":
                if shown is None:
                    out += mcp_call_added(self._numbering, index, item)
                    shown = self._shown[item["id"]] = {"status": "in_progress"}
                if shown["status"] != item["status"] and item["status"] != "in_progress":
                    out += mcp_call_done(self._numbering, index, item)
                    self._shown[item["id"]] = {"status": item["status"]}
            elif shown is None:
                out += whole_item(self._numbering, index, item)
                self._shown[item["id"]] = {"done": True}
        return out

    def _message_block(
        self, index: int, item: dict[str, Any], message: MessageView | None, claims: int
    ) -> list[Event]:
        text = item["content"][0]["text"]
        stream = (message.reply_stream if message is not None else None) or {}
        pieces = _pieces(text, stream.get("text"))
        attempt = stream.get("attempt", 0)
        attempt = min(attempt, ATTEMPTS_PER_CLAIM - 1) if isinstance(attempt, int) else 0
        ordinal = claims * ATTEMPTS_PER_CLAIM + attempt
        out: list[Event] = []
        live = self._live
        sent: list[str] = []
        if live is not None and live.seq == _seq_of(item["id"]):
            if live.ordinal == ordinal and "".join(live.pieces) == "".join(
                pieces[: len(live.pieces)]
            ):
                sent = live.pieces
                base = live.base
            else:
                out += self._drop_live("the committed reply is another attempt")
                live = None
        if live is None:
            base = self._numbering.last + 1 + ordinal * ATTEMPT_STRIDE
            out += open_message(base, index, item["id"])
        number = base + 2 + len(sent)
        for piece in pieces[len(sent) :]:
            out.append(text_delta(number, index, item["id"], piece))
            number += 1
        out += message_done(number, index, item)
        self._numbering.last = number + 2
        self._shown[item["id"]] = {"done": True}
        self._live = None
        return out

    # --- live -----------------------------------------------------------------------------------

    def _delta(self, delta: Delta) -> list[Event]:
        cutter = self._cutter
        if cutter is None or not self._started or not self._mine(cutter):
            return []
        if delta.message_seq <= self._last_seq or not delta.text:
            return []
        out: list[Event] = []
        live = self._live
        if live is not None and (live.seq != delta.message_seq or live.stream != delta.stream):
            out += self._drop_live("the model call started over")
            live = None
        if live is None:
            segment = cutter.done()[-1]
            ordinal = self._claims_since_step * ATTEMPTS_PER_CLAIM + min(
                delta.attempt, ATTEMPTS_PER_CLAIM - 1
            )
            item_id = message_item(self.turn_id, delta.message_seq)
            live = _LiveReply(
                delta.message_seq,
                delta.stream,
                ordinal,
                self._numbering.last + 1 + ordinal * ATTEMPT_STRIDE,
                len(segment.output),
            )
            self._live = live
            out += open_message(live.base, live.index, item_id)
        if len(live.pieces) >= MAX_BLOCK_EVENTS:
            return out
        item_id = message_item(self.turn_id, live.seq)
        out.append(text_delta(live.base + 2 + len(live.pieces), live.index, item_id, delta.text))
        live.pieces.append(delta.text)
        return out

    def _discarded(self, discarded: Discarded) -> list[Event]:
        live = self._live
        if live is None or not discarded.drops(live.seq, live.stream):
            return []
        return self._drop_live(discarded.reason)

    def _drop_live(self, reason: str) -> list[Event]:
        live = self._live
        assert live is not None
        self._live = None
        item_id = message_item(self.turn_id, live.seq)
        text = "".join(live.pieces)
        return [message_dropped(live.base + 2 + len(live.pieces), live.index, item_id, text)]


def _seq_of(item_id: str) -> int:
    return int(item_id.rsplit("_", 1)[1])


def _pieces(text: str, split: Any) -> list[str]:
    """The text cut as the live stream sent it; one piece when that is not known."""
    known = isinstance(split, list) and all(isinstance(n, int) and n > 0 for n in split)
    if known and split and sum(split) == len(text):
        pieces, at = [], 0
        for length in split:
            pieces.append(text[at : at + length])
            at += length
        return pieces
    return [text] if text else []


__all__ = ["ATTEMPT_STRIDE", "ResponseEvents"]
