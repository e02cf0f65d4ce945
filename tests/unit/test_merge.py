"""The follower's merge of committed events and live entries, walked row by row through its
table (`app/client/merge.py`), and the resume property: a reader that stops after any item and
resumes from its cursor gets exactly what an uninterrupted reader got after that point."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from app.client.merge import ENDED, GAP, RESTARTED, RESUMED, Cursor, LiveMerge
from app.errors import InvalidCursor
from app.live import ANY_STREAM, TEXT, CommitNotice, Delta, Discarded, Fragment, LiveEntry


@dataclass(frozen=True)
class Ev:
    """A committed event as the merge reads it."""

    seq: int
    type: str
    message_seq: int | None = None


def items(handed: Any) -> Any:
    """The items of what a merge handed out (without their cursors); `live`'s news kept."""
    if isinstance(handed, tuple):
        return [item for item, _ in handed[0]], handed[1]
    return [item for item, _ in handed]


def delta(message: int, index: int, text: str, stream: str = "s1") -> Delta:
    return Delta(message, stream, index, (Fragment(TEXT, 0, 0, text),))


def committed(seq: int, message: int) -> Ev:
    return Ev(seq, "message.committed", message)


# --- the table, row by row ------------------------------------------------------------------------


def test_committed_events_come_once_each_in_order() -> None:
    merge = LiveMerge()
    assert items(merge.committed([Ev(1, "turn.queued"), Ev(2, "turn.started")])) == [
        Ev(1, "turn.queued"),
        Ev(2, "turn.started"),
    ]
    assert items(merge.committed([Ev(2, "turn.started"), Ev(3, "status.changed")])) == [
        Ev(3, "status.changed")
    ]
    assert merge.after == 3


def test_deltas_are_shown_in_order_and_a_repeat_is_skipped() -> None:
    merge = LiveMerge()
    assert items(merge.live([delta(2, 0, "Hel"), delta(2, 1, "lo")])) == (
        [delta(2, 0, "Hel"), delta(2, 1, "lo")],
        False,
    )
    assert items(merge.live([delta(2, 1, "lo"), delta(2, 2, "!")])) == ([delta(2, 2, "!")], False)
    assert merge.cursor == Cursor(0, 2, "s1", 2)


def test_a_committed_message_replaces_its_partial_and_later_deltas_of_it_are_stale() -> None:
    merge = LiveMerge()
    merge.live([delta(2, 0, "Hel")])
    assert items(merge.committed([committed(5, 2)])) == [committed(5, 2)]
    assert merge.cursor == Cursor(5)
    assert items(merge.live([delta(2, 1, "lo")])) == ([], False)


def test_a_reader_that_joins_mid_reply_waits_for_the_commit() -> None:
    merge = LiveMerge()
    assert items(merge.live([delta(2, 3, "late"), delta(2, 4, "r")])) == ([], False)
    assert items(merge.committed([committed(5, 2)])) == [committed(5, 2)]


def test_a_gap_discards_what_was_shown_and_the_rest_of_that_stream() -> None:
    merge = LiveMerge()
    merge.live([delta(2, 0, "a")])
    assert items(merge.live([delta(2, 2, "c")])) == ([Discarded(2, "s1", GAP)], False)
    assert items(merge.live([delta(2, 3, "d")])) == ([], False)


def test_a_new_stream_for_the_same_message_discards_the_old_and_starts_over() -> None:
    merge = LiveMerge()
    merge.live([delta(2, 0, "first try")])
    assert items(merge.live([delta(2, 0, "second", stream="s2")])) == (
        [Discarded(2, "s1", RESTARTED), delta(2, 0, "second", stream="s2")],
        False,
    )
    assert items(merge.live([delta(2, 1, "late", stream="s1")])) == ([], False)


def test_a_discarded_stream_is_dropped_once_and_an_unseen_one_costs_nothing() -> None:
    merge = LiveMerge()
    merge.live([delta(2, 0, "a")])
    gone = Discarded(2, "s1", "HTTP 429; retrying in 3 s")
    assert items(merge.live([gone])) == ([gone], False)
    assert items(merge.live([gone])) == ([], False)
    assert items(merge.live([Discarded(3, "other", "x")])) == ([], False)


def test_a_resumed_turn_s_notice_drops_every_stream_of_its_message() -> None:
    merge = LiveMerge()
    merge.live([delta(4, 0, "a")])
    assert items(merge.live([Discarded(4, ANY_STREAM, RESUMED)])) == (
        [Discarded(4, "s1", RESUMED)],
        False,
    )


@pytest.mark.parametrize(("kind", "reason"), [("turn.resumed", RESUMED), ("turn.failed", ENDED)])
def test_a_resumed_or_ended_turn_drops_the_partial_before_its_event(kind: str, reason: str) -> None:
    merge = LiveMerge()
    merge.live([delta(4, 0, "a")])
    assert items(merge.committed([Ev(9, kind)])) == [Discarded(4, "s1", reason), Ev(9, kind)]


def test_a_commit_notice_says_whether_the_log_has_news() -> None:
    merge = LiveMerge(after=7)
    assert items(merge.live([CommitNotice(7)])) == ([], False)
    assert items(merge.live([CommitNotice(8)])) == ([], True)
    assert items(merge.live([CommitNotice(0)])) == ([], True)  # a web-side write: read to know


def test_the_last_message_the_log_read_saw_settles_earlier_partials() -> None:
    merge = LiveMerge()
    merge.live([delta(3, 0, "a")])
    assert items(merge.committed([], last_message_seq=3)) == []
    assert items(merge.live([delta(3, 1, "b")])) == ([], False)


def test_a_partial_still_shown_when_the_conversation_rests_is_dropped() -> None:
    """Its end was lost with the channel: nothing forms at rest, so the reader drops it."""
    merge = LiveMerge.starting_at(Cursor(9, 4, "s1", 2))
    assert items(merge.rested()) == [Discarded(4, "s1", ENDED)]
    assert merge.cursor == Cursor(9)
    assert items(merge.rested()) == []


def test_deltas_read_at_rest_are_a_dead_reply_s_until_the_log_has_news() -> None:
    merge = LiveMerge(after=9)
    merge.rested()
    assert items(merge.live([delta(4, 0, "dead"), delta(4, 1, " reply")])) == ([], False)
    assert items(merge.committed([Ev(10, "turn.queued")])) == [Ev(10, "turn.queued")]
    assert items(merge.live([delta(5, 0, "new", stream="s2")])) == (
        [delta(5, 0, "new", stream="s2")],
        False,
    )


# --- the cursor ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cursor"),
    [("0", Cursor()), ("12", Cursor(12)), ("12:5:ab12:7", Cursor(12, 5, "ab12", 7))],
)
def test_a_cursor_reads_back_from_its_text(text: str, cursor: Cursor) -> None:
    assert Cursor.parse(text) == cursor
    assert str(cursor) == text
    assert Cursor.parse(cursor) is cursor


@pytest.mark.parametrize(
    "bad", [-1, "-1", "x", "1:2", "1:0:s:0", "1:2::0", "1:2:s:-1", "1.5", True, "1:2:s:x"]
)
def test_a_malformed_cursor_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidCursor):
        Cursor.parse(bad)


# --- resuming at every boundary -----------------------------------------------------------------

# What a conversation's reader can be handed, in the order it happens: (committed events as the
# log would return them, live entries as the channel would). A tool turn whose second model call
# is retried and whose worker then dies mid-reply.
HISTORY: list[tuple[list[Ev], list[LiveEntry]]] = [
    ([Ev(1, "turn.queued"), committed(2, 1), Ev(3, "status.changed"), Ev(4, "turn.started")], []),
    ([], [CommitNotice(4), delta(2, 0, "Let me ")]),
    ([], [delta(2, 1, "look.")]),
    ([committed(5, 2), Ev(6, "status.changed")], [CommitNotice(6)]),
    ([committed(7, 3)], [CommitNotice(7), delta(4, 0, "The ans", stream="a")]),
    ([], [Discarded(4, "a", "HTTP 503; retrying in 3 s"), delta(4, 0, "The", stream="b")]),
    ([], [delta(4, 1, " answer", stream="b")]),
    ([Ev(8, "turn.resumed")], [Discarded(4, ANY_STREAM, RESUMED), CommitNotice(8)]),
    ([], [delta(4, 0, "The answer is 42.", stream="c")]),
    ([committed(9, 4), Ev(10, "turn.completed"), Ev(11, "status.changed")], [CommitNotice(11)]),
]


def _read(
    merge: LiveMerge, steps: list[tuple[list[Ev], list[LiveEntry]]], first: int = 0
) -> list[tuple[Any, int, Cursor]]:
    """Everything a reader gets, each item with its step and the cursor after it. In a step,
    the live entries first, then the log the notice sent it to (how `Following` reads)."""
    got: list[tuple[Any, int, Cursor]] = []
    for step, (events, entries) in enumerate(steps, start=first):
        for item, cursor in [*merge.live(entries)[0], *merge.committed(events)]:
            got.append((item, step, cursor))
    return got


def test_an_uninterrupted_reader_sees_each_event_once_and_every_dropped_partial() -> None:
    items = [item for item, _, _ in _read(LiveMerge(), HISTORY)]
    events = [item.seq for item in items if isinstance(item, Ev)]
    assert events == list(range(1, 12))
    dropped = [item for item in items if isinstance(item, Discarded)]
    assert [(d.stream, d.reason) for d in dropped] == [
        ("a", "HTTP 503; retrying in 3 s"),
        ("b", RESUMED),
    ]


WHOLE = _read(LiveMerge(), HISTORY)


@pytest.mark.parametrize("stop", range(len(WHOLE)))
def test_a_reader_resumed_after_any_item_gets_exactly_the_rest(stop: int) -> None:
    """It reconnects at the end of the step where it stopped: the log after its cursor is read
    (with the conversation's last message seq), then every entry the channel retains, and it
    goes on from the next step."""
    _, step, cursor = WHOLE[stop]
    merge = LiveMerge.starting_at(cursor)
    log = [event for events, _ in HISTORY[: step + 1] for event in events]
    retained = [entry for _, entries in HISTORY[: step + 1] for entry in entries]
    last_message = max(e.message_seq or 0 for e in log)  # as the log read sees it
    resumed = [
        *items(merge.committed([e for e in log if e.seq > cursor.after], last_message)),
        *items(merge.live(retained))[0],
    ]
    resumed += [item for item, _, _ in _read(merge, HISTORY[step + 1 :], step + 1)]
    assert resumed == [item for item, _, _ in WHOLE[stop + 1 :]]
