"""The checker's processes (`app/worker/checker.py`): a check past its deadline is killed, one
past its memory cap ends, each answered `Unjudged` saying why, and the next check gets a new
process; the processes hold nothing of the worker's environment."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from app.worker.checker import SchemaChecker
from app.worker.structured import Matched, Unjudged
from tests.integration.test_bounded_schema_checks import FANS_OUT, UNIQUE

SMALL = json.dumps({"rows": [1, 2]}) + " " * 20_000  # (past INLINE_CHARS: judged in a child)


@pytest.fixture
def checker() -> Iterator[SchemaChecker]:
    checker = SchemaChecker(seconds=0.5, memory_mb=256)
    yield checker
    checker.close()


def test_a_check_past_its_deadline_is_killed_and_the_next_gets_a_new_process(
    checker: SchemaChecker,
) -> None:
    async def checks() -> tuple[object, object]:
        return await checker.judge('{"a": "x"}', FANS_OUT), await checker.judge(SMALL, UNIQUE)

    timed_out, next_one = asyncio.run(checks())

    assert timed_out == Unjudged(
        "The model's answer could not be checked against the output schema: the check took "
        "longer than 0.5 s (the schema makes it too costly)"
    )
    assert next_one == Matched({"rows": [1, 2]})


def test_a_check_past_its_memory_cap_is_told_and_the_next_gets_a_new_process() -> None:
    rows = json.dumps({"rows": [{"a": n} for n in range(70_000)]})  # (~1 MB: ~100 MB checked)
    # A deadline no busy machine reaches: only the memory cap may end this check.
    checker = SchemaChecker(seconds=60, memory_mb=64)

    async def checks() -> tuple[object, object]:
        return await checker.judge(rows, UNIQUE), await checker.judge(SMALL, UNIQUE)

    try:
        over, next_one = asyncio.run(checks())
    finally:
        checker.close()

    assert isinstance(over, Unjudged) and "64 MB" in over.error
    assert next_one == Matched({"rows": [1, 2]})


def test_a_process_s_start_is_not_counted_in_the_check_s_deadline() -> None:
    # A new process imports for longer than this deadline (~0.2-0.5 s here, more on a busy
    # machine); the check itself takes milliseconds.
    checker = SchemaChecker(seconds=0.15, memory_mb=256)
    try:
        assert asyncio.run(checker.judge(SMALL, UNIQUE)) == Matched({"rows": [1, 2]})
    finally:
        checker.close()


def test_the_checker_s_processes_hold_no_secret(
    checker: SchemaChecker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATWORKER_LLM_API_KEY", "sk-the-operators-key")
    asyncio.run(checker.judge(SMALL, UNIQUE))

    (pid,) = checker.pids()
    with open(f"/proc/{pid}/environ", "rb") as environ:
        names = {entry.split(b"=", 1)[0] for entry in environ.read().split(b"\0") if entry}
    assert b"CHATWORKER_LLM_API_KEY" not in names and names <= {
        b"PATH",
        b"LANG",
        b"LC_ALL",
        b"PYTHONPATH",
        b"PYTHONDONTWRITEBYTECODE",
    }
