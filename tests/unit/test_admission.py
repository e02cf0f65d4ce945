"""Admission, row by row of the table in `app/client/admission.py`'s header: each test is tagged
with the rows it walks, and a last test fails naming any row no test is tagged with."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import app.models
from app.client import admission
from app.client.admission import (
    Answer,
    Busy,
    Enqueue,
    Interrupt,
    Keyed,
    KeyReused,
    NotRetryable,
    NotSteerable,
    OverBudget,
    OverOwnerLimit,
    Read,
    Repeat,
    Rollback,
    Start,
    Steer,
    admit_retry,
    admit_submit,
)

Test = TypeVar("Test", bound=Callable[..., Any])

USED_UP = "Budget exceeded: this conversation used 10 tokens in total; its total token budget is 5"


TAGGED: dict[str, tuple[int, ...]] = {}  # test name -> the rows it walks


def row(*numbers: int, tagged: dict[str, tuple[int, ...]] = TAGGED) -> Callable[[Test], Test]:
    """Tag a test with the rows of admission's table it walks."""

    def tag(test: Test) -> Test:
        tagged[test.__name__] = numbers
        return test

    return tag


def keyed(text: str | None = "hello", *, waits: bool = False) -> Keyed:
    return Keyed(uuid.uuid4(), 3, "completed", 5, text, waits)


@row(1)
def test_a_used_up_budget_refuses_a_submit_and_a_retry() -> None:
    for status in ("idle", "processing", "failed"):
        read = Read(status, used_up=USED_UP, keyed=keyed())
        assert admit_submit(read, "hello", "enqueue") == OverBudget(USED_UP)
        assert admit_retry(read) == OverBudget(USED_UP)


@row(2)
def test_the_same_key_and_text_is_the_same_turn_again() -> None:
    seen = keyed("hello", waits=True)
    for status in ("idle", "processing"):
        read = Read(status, keyed=seen, waiting=True, questions=("c1",), running=9, limit=1)
        assert admit_submit(read, "hello", "reject") == Repeat(seen)


@row(3)
def test_the_same_key_with_another_text_is_refused() -> None:
    seen = keyed("hello")
    assert admit_submit(Read("idle", keyed=seen), "other", "interrupt") == KeyReused(seen)


@row(4)
def test_a_message_answers_the_open_questions_of_the_waiting_turn() -> None:
    read = Read("idle", waiting=True, questions=("c1", "c2"), running=5, limit=1)
    assert admit_submit(read, "blue", "reject") == Answer(("c1", "c2"))


@row(5, 15)
def test_a_new_running_turn_past_the_owner_limit_is_refused() -> None:
    at_limit = Read("idle", running=2, limit=2)
    assert admit_submit(at_limit, "hi", "reject") == OverOwnerLimit(2)
    assert admit_retry(Read("failed", running=3, limit=2)) == OverOwnerLimit(3)
    assert OverOwnerLimit(2).retry_after == admission.RETRY_AFTER_SECONDS


@row(6)
def test_a_resting_conversation_starts_the_turn_now() -> None:
    for status in ("idle", "failed"):
        assert admit_submit(Read(status), "hi", "reject") == Start()
        assert admit_submit(Read(status, running=1, limit=2), "hi", "enqueue") == Start()


@row(7)
def test_a_busy_conversation_refuses_with_reject() -> None:
    for status in ("processing", "tool_loop"):
        assert admit_submit(Read(status), "hi", "reject") == Busy(waits_for_client=False)
    # a waiting turn with no open question waits for its client's outputs or an approval
    waiting = Read("idle", waiting=True)
    assert admit_submit(waiting, "hi", "reject") == Busy(waits_for_client=True)


@row(8)
def test_a_busy_conversation_queues_with_enqueue() -> None:
    assert admit_submit(Read("processing", running=9, limit=1), "hi", "enqueue") == Enqueue()
    assert admit_submit(Read("idle", waiting=True), "hi", "enqueue") == Enqueue()


@row(9)
def test_a_busy_conversation_interrupts_with_interrupt() -> None:
    assert admit_submit(Read("tool_loop"), "hi", "interrupt") == Interrupt()
    assert admit_submit(Read("idle", waiting=True), "hi", "interrupt") == Interrupt()


@row(4, 10)
def test_rollback_interrupts_and_an_edit_never_answers_a_question() -> None:
    assert admit_submit(Read("processing"), "hi", "rollback") == Rollback()
    assert admit_submit(Read("idle", waiting=True), "hi", "rollback") == Rollback()
    # an edit while a question waits is not its answer: it follows the busy policy
    asked = Read("idle", waiting=True, questions=("c1",), branching=True)
    assert admit_submit(asked, "hi", "rollback") == Rollback()
    assert admit_submit(asked, "hi", "reject") == Busy(waits_for_client=True)


@row(11)
def test_an_edit_or_a_regenerate_cannot_steer() -> None:
    branching = Read("processing", branching=True)
    assert admit_submit(branching, "hi", "steer") == NotSteerable(branching=True)
    # at rest it simply starts (nothing runs to steer)
    assert admit_submit(Read("idle", branching=True), "hi", "steer") == Start()


@row(12)
def test_a_turn_waiting_for_its_client_cannot_be_steered() -> None:
    waiting = Read("idle", waiting=True)
    assert admit_submit(waiting, "hi", "steer") == NotSteerable(branching=False)
    # a waiting question is answered by the message, whatever the policy (row 4 first)
    asked = Read("idle", waiting=True, questions=("c1",))
    assert admit_submit(asked, "blue", "steer") == Answer(("c1",))


@row(13)
def test_a_running_turn_is_steered_and_a_resting_one_simply_starts() -> None:
    for status in ("processing", "tool_loop"):
        assert admit_submit(Read(status, running=9, limit=1), "hi", "steer") == Steer()
    assert admit_submit(Read("idle"), "hi", "steer") == Start()


@row(14)
def test_only_a_failed_conversation_is_retried() -> None:
    for status in ("idle", "processing", "tool_loop"):
        assert admit_retry(Read(status)) == NotRetryable(status)


@row(16)
def test_a_failed_conversation_is_retried_now() -> None:
    assert admit_retry(Read("failed")) == Start()
    assert admit_retry(Read("failed", running=1, limit=2)) == Start()


def test_admission_s_copies_of_the_database_s_words_agree() -> None:
    assert admission.FAILED == app.models.FAILED
    assert set(admission.AT_REST) == {app.models.IDLE, app.models.FAILED}


def table_rows(doc: str) -> set[int]:
    """The row numbers of the table in a module's header."""
    return {int(number) for number in re.findall(r"^\s{0,2}(\d+)\s{2}", doc, re.MULTILINE)}


def untested_rows(doc: str, tagged: dict[str, tuple[int, ...]], tests: set[str]) -> list[int]:
    """The table's rows that no test (of `tests`, the module's) is tagged with."""
    covered = {n for name, numbers in tagged.items() if name in tests for n in numbers}
    return sorted(table_rows(doc) - covered)


def test_every_row_of_the_table_has_a_tagged_test() -> None:
    tests = {name for name in vars(sys.modules[__name__]) if name.startswith("test_")}
    assert table_rows(admission.__doc__ or "") == set(range(1, 17))
    assert untested_rows(admission.__doc__ or "", TAGGED, tests) == []


def test_the_check_names_a_row_with_no_tagged_test() -> None:
    tagged: dict[str, tuple[int, ...]] = {}

    @row(1, tagged=tagged)
    def test_one() -> None: ...

    doc = " 1  a row                decision\n 2  another row          decision\n"
    assert untested_rows(doc, tagged, {"test_one"}) == [2]
