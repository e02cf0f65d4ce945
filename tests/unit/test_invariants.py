"""The invariant checker catches each kind of broken transcript (a checker that cannot fail
proves nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.invariants import inactive_paths, transcript_violations, tree_violations


def user(seq: int) -> tuple[Any, ...]:
    return (seq, "user", "q", None, None)


def calls(seq: int, *ids: str) -> tuple[Any, ...]:
    return (seq, "assistant", None, [{"id": i, "name": "t", "arguments": "{}"} for i in ids], None)


def result(seq: int, call_id: str) -> tuple[Any, ...]:
    return (seq, "tool", "ok", None, call_id)


def answer(seq: int) -> tuple[Any, ...]:
    return (seq, "assistant", "a", None, None)


def test_a_clean_transcript_has_no_violations() -> None:
    transcript = [
        user(1),
        calls(2, "a", "b"),
        result(3, "a"),
        result(4, "b"),
        answer(5),
        user(6),
        answer(7),
    ]
    assert transcript_violations(transcript, "idle") == []


@pytest.mark.parametrize(
    ("transcript", "status", "expected"),
    [
        ([user(1), answer(3)], "idle", "not gap-free"),
        ([user(1), calls(2, "a"), answer(3)], "idle", "has no result"),
        ([user(1), calls(2, "a"), result(3, "a"), result(4, "a"), answer(5)], "idle", "2 results"),
        (
            [user(1), calls(2, "a"), result(3, "a"), calls(4, "a"), result(5, "a"), answer(6)],
            "idle",
            "not unique",
        ),
        ([user(1), result(2, "zz"), answer(3)], "idle", "answers no earlier call"),
        ([user(1), answer(2), answer(3)], "idle", "more than one final answer"),
        ([user(1), answer(2), calls(3, "a"), result(4, "a")], "failed", "followed by a assistant"),
        ([user(1), calls(2, "a"), result(3, "a")], "idle", "does not end with an answer"),
    ],
)
def test_each_violation_is_reported(
    transcript: list[tuple[Any, ...]], status: str, expected: str
) -> None:
    problems = transcript_violations(transcript, status)
    assert any(expected in p for p in problems), problems


def test_a_failed_turn_may_leave_its_last_calls_open() -> None:
    assert transcript_violations([user(1), calls(2, "a", "b"), result(3, "a")], "failed") == []
    assert (
        transcript_violations([user(1), calls(2, "a"), result(3, "a"), calls(4, "b")], "failed")
        == []
    )
    problems = transcript_violations([user(1), calls(2, "a"), calls(3, "b")], "failed")
    assert any("a has no result" in p for p in problems)


def test_a_failed_turn_s_open_calls_stay_allowed_after_the_next_turn_answers() -> None:
    later = [user(1), calls(2, "a", "b"), result(3, "a"), user(4), answer(5)]
    assert transcript_violations(later, "idle") == []
    # (the turn before the failed one still had to answer all of its calls)
    earlier = [user(1), calls(2, "x"), answer(3), user(4), calls(5, "a"), user(6), answer(7)]
    assert [p for p in transcript_violations(earlier, "idle") if "x has no result" in p]


def node(seq: int, role: str, parent: int | None, active: bool = True) -> tuple[Any, ...]:
    content = "a" if role == "assistant" else "q"
    return (seq, role, content, None, None, parent, active)


def test_a_tree_with_one_active_path_and_valid_versions_has_no_violations() -> None:
    # 1 user, 2 answer (regenerated as 3), 4 edit of 1, 5 its answer: the path 4-5
    tree = [
        node(1, "user", None, False),
        node(2, "assistant", 1, False),
        node(3, "assistant", 1, False),
        node(4, "user", None),
        node(5, "assistant", 4),
    ]
    assert tree_violations(tree) == []
    assert [leaf for leaf, _path in inactive_paths(tree)] == [2, 3]
    assert [row[0] for row in inactive_paths(tree)[1][1]] == [1, 3]


def test_a_broken_tree_is_reported() -> None:
    two_paths = [node(1, "user", None), node(2, "assistant", 1), node(3, "assistant", 1)]
    assert any("not one path" in p for p in tree_violations(two_paths))
    orphan = [node(1, "user", None), node(2, "assistant", 7)]
    assert any("parent 7, not an older message" in p for p in tree_violations(orphan))
    gap = [node(1, "user", None), node(3, "assistant", 1)]
    assert any("gap-free" in p for p in tree_violations(gap))
