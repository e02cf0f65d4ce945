"""What a run that raised leads to (`app/worker/crashes.py`'s table), decided without I/O: a
cancel ends it, spent attempts fail it with the crash's own text, else it is tried again after a
spread that grows with its attempts."""

from __future__ import annotations

import pytest

from app.worker.crashes import (
    CRASHED_ERROR,
    EndCancelled,
    GiveUp,
    TryAgain,
    decide,
    readable,
)


def test_a_cancelled_turn_ends_cancelled_whatever_its_attempts() -> None:
    assert decide(1, 3, True, "boom", 0.5) == EndCancelled()
    assert decide(9, 3, True, "boom", 0.5) == EndCancelled()


@pytest.mark.parametrize(("attempts", "spent"), [(1, False), (2, False), (3, True), (4, True)])
def test_the_claim_that_spends_the_attempts_fails_the_turn_with_the_error(
    attempts: int, spent: bool
) -> None:
    found = decide(attempts, 3, False, "ValueError: no", 0.5)
    if spent:
        assert found == GiveUp(CRASHED_ERROR.format(attempts=attempts, why="ValueError: no"))
    else:
        assert isinstance(found, TryAgain) and 0 <= found.delay <= 2 ** (attempts - 1)


def test_one_attempt_allowed_fails_on_the_first_crash() -> None:
    assert isinstance(decide(1, 1, False, "x", 0.0), GiveUp)


def test_the_crash_is_told_in_one_line_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", "hunter2-secret-value")
    assert readable(RuntimeError("a\n  b")) == "RuntimeError: a b"
    assert readable(KeyError()) == "KeyError"
    told = readable(
        RuntimeError("key hunter2-secret-value and sk-abcdefghijkl leaked"), ("leaked",)
    )
    assert "hunter2" not in told and "sk-abcdefghijkl" not in told and "leaked" not in told
