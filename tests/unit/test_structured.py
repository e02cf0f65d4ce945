"""Structured output and fallback models, decided without I/O: an answer judged against its
turn's schema (rows 27-29), the repair the model is sent, and a failed call moved to the next
model (row 30); the retry policy's word on whether a failure may fall back."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.worker.llm.retry import call_with_retries, is_unavailable
from app.worker.plan import Entry, next_step
from app.worker.ports import ModelError
from app.worker.steps import CallModel, Cancel, Fail, Finish
from app.worker.structured import (
    REPAIR_PROMPT,
    UNJUDGED_ERROR,
    Matched,
    Mismatch,
    Unjudged,
    instruction,
    judge,
    refusal_error,
    repair_prompt,
    response_format,
)
from app.worker.transcript import Transcript
from app.worker.verdict import (
    FallBack,
    RecordAnswer,
    RecordCalls,
    RecordRefused,
    judge_reply,
    judged_against,
    model_failed,
    next_model,
)
from tests.unit.entries import A, calls, result, user

TICKET = {
    "name": "ticket",
    "schema": {
        "type": "object",
        "properties": {
            "kind": {"enum": ["bug", "question"]},
            "priority": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "required": ["kind", "priority"],
        "additionalProperties": False,
    },
    "strict": True,
}
CAP = 20


def refused(seq: int, error: str = "at kind: 'feature' is not one of ['bug', 'question']") -> Entry:
    return Entry(seq, "assistant", '{"kind": "feature"}', is_error=True, refusal=error)


# --- judging an answer ----------------------------------------------------------------------


def test_an_answer_that_matches_is_parsed() -> None:
    assert judge('{"kind": "bug", "priority": 2}', TICKET) == Matched(
        {"kind": "bug", "priority": 2}
    )
    # a model that fenced its JSON anyway: the fence is taken off
    fenced = '```json\n{"kind": "question", "priority": 1}\n```'
    assert judge(fenced, TICKET) == Matched({"kind": "question", "priority": 1})


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("It is a bug.", "the answer is not JSON"),
        ("", "the answer is not JSON"),
        ('{"kind": "bug"}', "at the root: 'priority' is a required property"),
        ('{"kind": "feature", "priority": 1}', "at kind: 'feature' is not one of"),
        ('{"kind": "bug", "priority": 9}', "at priority: 9 is greater than the maximum of 3"),
        ('{"kind": "bug", "priority": 1, "x": 1}', "Additional properties are not allowed"),
        ("[1, 2]", "at the root: [1, 2] is not of type 'object'"),
    ],
)
def test_an_answer_that_does_not_match_says_where_and_why(answer: str, says: str) -> None:
    found = judge(answer, TICKET)
    assert isinstance(found, Mismatch)
    assert says in found.error


def test_what_the_model_is_sent_of_the_schema() -> None:
    assert response_format(TICKET) == {
        "type": "json_schema",
        "json_schema": {"name": "ticket", "schema": TICKET["schema"], "strict": True},
    }
    told = instruction(TICKET)
    assert "only a JSON value" in told
    assert json.loads(told.split("\n", 1)[1]) == TICKET["schema"]
    assert repair_prompt("at kind: no") == REPAIR_PROMPT.format(error="at kind: no")


# --- rows 27-29 ---------------------------------------------------------------------------------


@pytest.mark.row(27)
def test_a_text_answer_of_a_structured_turn_is_judged_against_its_schema() -> None:
    def verdict(content: str) -> object:
        judged = judge(content, TICKET)
        return judge_reply(content, (), "stop", used_ids=set(), seq=2, judged=judged)

    good = '{"kind": "bug", "priority": 3}'
    assert verdict(good) == RecordAnswer(good, {"kind": "bug", "priority": 3})
    bad = verdict('{"kind": "bug"}')
    assert isinstance(bad, RecordRefused)
    assert bad.content == '{"kind": "bug"}'
    assert "'priority' is a required property" in bad.error
    # tool calls are not the answer: they run first, whatever the schema
    assert judged_against(None, (A,), "tool_calls", TICKET) is None
    assert judge_reply(None, (A,), "tool_calls", used_ids=set(), seq=2) == RecordCalls((A,))
    assert judged_against(" ", (), "stop", TICKET) is None  # (blank: row 13)
    assert judged_against("{}", (), "content_filter", TICKET) is None  # (row 11)
    assert judged_against("{}", (), "stop", TICKET) == TICKET
    assert judged_against("{}", (), "stop", None) is None
    # an answer the checker could not judge within its bounds fails the turn, saying why
    unjudged = Unjudged(UNJUDGED_ERROR.format(why="the check took longer than 2 s"))
    assert judge_reply("{}", (), "stop", used_ids=set(), seq=2, judged=unjudged) == Fail(
        unjudged.error
    )
    # a turn without a schema: any text, no parsed value
    assert judge_reply("It is a bug.", (), "stop", used_ids=set(), seq=2) == RecordAnswer(
        "It is a bug."
    )


@pytest.mark.row(28)
def test_a_refused_answer_is_sent_back_once_for_a_repair() -> None:
    assert next_step([user(1), refused(2)], 1, CAP) == CallModel()
    # after tool calls too; a cancel comes first, and the iteration cap
    assert next_step([user(1), calls(2, A), result(3, A), refused(4)], 2, CAP) == CallModel()
    assert next_step([user(1), refused(2)], 1, CAP, cancel_requested=True) == Cancel()
    assert next_step([user(1), refused(2)], CAP, CAP) == Fail("Max tool iterations reached")
    # an earlier turn's refusal is not this turn's
    earlier = [user(1), refused(2), Entry(3, "assistant", "{}"), user(4)]
    assert next_step(earlier, 0, CAP) == CallModel()
    # the repaired answer ends the turn
    assert next_step([user(1), refused(2), Entry(3, "assistant", "{}")], 2, CAP) == Finish()


@pytest.mark.row(29)
def test_a_second_refused_answer_fails_the_turn_saying_what_was_wrong() -> None:
    found = next_step([user(1), refused(2), refused(3, "at priority: 9 is too big")], 2, CAP)
    assert found == Fail(refusal_error("at priority: 9 is too big"))
    assert isinstance(found, Fail)
    # a retry of the failed turn (its iterations start over at 0) asks the model again
    assert next_step([user(1), refused(2), refused(3)], 0, CAP) == CallModel()
    assert found.error.startswith("The model's answer did not match the output schema after 1")


def test_a_refused_answer_is_sent_with_what_the_model_was_told() -> None:
    transcript = Transcript("Be brief.", [user(1, "classify"), refused(2, "at kind: no")])
    assert transcript.provider_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "classify"},
        {"role": "assistant", "content": '{"kind": "feature"}'},
        {"role": "user", "content": repair_prompt("at kind: no")},
    ]


# --- row 30: fallback models -----------------------------------------------------------------


@pytest.mark.row(10, 30)
def test_a_failed_call_moves_to_the_next_model_only_when_the_provider_was_down() -> None:
    models = ("openai/primary", "anthropic/second", "openai/third")
    assert model_failed("down", may_fall_back=True, using=models[0], models=models) == FallBack(
        "anthropic/second"
    )
    assert model_failed("down", may_fall_back=True, using=models[1], models=models) == FallBack(
        "openai/third"
    )
    # the last one failed too: the turn fails with its error
    assert model_failed("down", may_fall_back=True, using=models[2], models=models) == Fail("down")
    # a mistake of the request (a 400, a 401) is not the provider being down
    assert model_failed("bad", may_fall_back=False, using=models[0], models=models) == Fail("bad")
    # no fallbacks named: row 10 as ever
    assert model_failed("down", may_fall_back=True, using="m", models=("m",)) == Fail("down")
    assert model_failed("down") == Fail("down")


def test_the_next_model_is_the_one_after_the_model_in_use() -> None:
    assert next_model(("a", "b", "c"), "a") == "b"
    assert next_model(("a", "b", "c"), "c") is None
    assert next_model(("a", "b"), "elsewhere") == "a"
    assert next_model((), "a") is None


class ProviderError(Exception):
    def __init__(self, status_code: int | None, message: str = "boom") -> None:
        super().__init__(message)
        self.status_code = status_code


class APIConnectionError(Exception):
    """Named like litellm's: the provider could not be reached."""


@pytest.mark.parametrize(
    ("error", "down"),
    [
        (ProviderError(500), True),
        (ProviderError(502), True),
        (ProviderError(504), True),
        (APIConnectionError("connection refused"), True),
        (TimeoutError("read timed out"), True),
        (ProviderError(400), False),
        (ProviderError(401), False),
        (ProviderError(404), False),
        (ValueError("a bug"), False),
    ],
)
def test_a_provider_is_down_when_it_did_not_answer_or_failed_on_its_side(
    error: Exception, down: bool
) -> None:
    assert is_unavailable(error) is down


@pytest.mark.parametrize(
    ("failures", "may_fall_back"),
    [
        ([ProviderError(429, "rate limited")] * 3, True),  # retries spent
        ([ProviderError(503)] * 3, True),
        ([ProviderError(500)], True),  # not retried, but down
        ([APIConnectionError("refused")], True),
        ([ProviderError(400, "messages: field required")], False),
        ([ProviderError(401, "invalid api key")], False),
    ],
)
def test_the_model_error_says_whether_another_model_may_answer(
    failures: list[Exception], may_fall_back: bool
) -> None:
    async def no_wait(seconds: float) -> None:
        pass

    calls = iter(failures)

    async def call() -> str:
        raise next(calls)

    with pytest.raises(ModelError) as caught:
        asyncio.run(call_with_retries(call, sleep=no_wait))
    assert caught.value.may_fall_back is may_fall_back
