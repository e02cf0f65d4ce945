"""The context budget (`app/worker/context.py`, rows 19-25 of the planner) and what a compacted
transcript sends (`Transcript.compact`, `Transcript.size`): pure, no I/O."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from app.testing.fake_llm.tokens import count_prompt
from app.worker import context
from app.worker.context import (
    COMPACTION_OFF,
    DID_NOT_HELP,
    NOT_COMPACTED,
    Compacted,
    Elide,
    Policy,
    Size,
    Summarize,
    TooLarge,
    decide,
    window_in,
)
from app.worker.messages import ELIDED_OUTPUT, SUMMARY_HEADING
from app.worker.plan import Entry, ToolCall
from app.worker.transcript import Transcript
from tests.unit.entries import answer, calls, result, user

RULES = Policy(window=10_000, threshold=0.8, reply_tokens=1_000)
UNDER = Size(tokens=7_000, elidable=0, elide_through=0, cut=None, kept_tokens=7_000)
OVER = Size(tokens=8_500, elidable=0, elide_through=0, cut=None, kept_tokens=8_500)


# --- the decision table ---------------------------------------------------------------------------


def test_policy_trigger_and_limit_keep_the_reply_s_room() -> None:
    assert RULES.reserve == 1_000
    assert RULES.limit == 9_000
    assert RULES.trigger == 8_000
    assert Policy(window=2_000, reply_tokens=4_096).reserve == 500  # at most a quarter


@pytest.mark.row(19)
def test_row_19_no_budget_without_a_window_or_with_compaction_off() -> None:
    over = OVER._replace(elidable=500, cut=(1, 10))
    assert decide(over, RULES._replace(window=None), NOT_COMPACTED) is None
    assert decide(over, RULES._replace(compaction=False), NOT_COMPACTED) is None


@pytest.mark.row(20)
def test_row_20_a_request_under_the_trigger_goes_as_it_is() -> None:
    assert decide(UNDER._replace(elidable=500, cut=(1, 10)), RULES, NOT_COMPACTED) is None


@pytest.mark.row(21)
def test_row_21_earlier_turns_outputs_are_elided_first() -> None:
    over = OVER._replace(elidable=500, elide_through=40, cut=(1, 10))
    assert decide(over, RULES, Compacted(2, 12, 0)) == Elide(13, 40)
    # the session cache off: nothing could read them back, so they are not elided
    assert decide(over, RULES._replace(elide=False), NOT_COMPACTED) == Summarize(1, 10)


@pytest.mark.row(22)
def test_row_22_then_the_oldest_messages_are_summarised() -> None:
    assert decide(OVER._replace(cut=(5, 30)), RULES, NOT_COMPACTED) == Summarize(5, 30)


@pytest.mark.row(23)
def test_row_23_nothing_left_and_surely_past_the_window_fails_saying_so() -> None:
    decision = decide(OVER._replace(tokens=20_001), RULES, NOT_COMPACTED)
    assert isinstance(decision, TooLarge)
    assert "context window of 10,000 tokens" in decision.error
    assert "about 20,001 tokens" in decision.error


@pytest.mark.row(24)
def test_row_24_nothing_left_otherwise_goes_as_it_is_and_the_provider_decides() -> None:
    assert decide(OVER, RULES, NOT_COMPACTED) is None
    assert decide(OVER._replace(tokens=20_000), RULES, NOT_COMPACTED) is None


@pytest.mark.row(25)
def test_row_25_an_overflow_compacts_whatever_the_estimate_once() -> None:
    said = "maximum context length is 6000 tokens"
    under = UNDER._replace(elidable=500, elide_through=9)
    assert decide(under, RULES, NOT_COMPACTED, overflowed=True) == Elide(1, 9)
    unknown = RULES._replace(window=None)
    assert decide(under, unknown, NOT_COMPACTED, overflowed=True) == Elide(1, 9)
    again = decide(under, RULES, NOT_COMPACTED, overflowed=True, retried=True, overflow_detail=said)
    assert isinstance(again, TooLarge)
    assert DID_NOT_HELP in again.error and said in again.error
    off = decide(under, RULES._replace(compaction=False), NOT_COMPACTED, overflowed=True)
    assert isinstance(off, TooLarge)
    assert COMPACTION_OFF in off.error and "CHATWORKER_COMPACTION=false" in off.error
    nothing = decide(UNDER, RULES, NOT_COMPACTED, overflowed=True)
    assert isinstance(nothing, TooLarge) and "nothing is left to compact" in nothing.error


def test_the_conversation_s_policy_wins_over_the_settings() -> None:
    settings = SimpleNamespace(
        context_window=None,
        context_threshold=0.8,
        context_reply_tokens=4096,
        compaction=True,
        compaction_model=None,
        prompt_cache=True,
        session_cache=True,
    )
    assert context.policy(settings, None, 128_000).window == 128_000
    assert context.policy(settings, None, None).window is None
    settings.context_window = 32_000
    assert context.policy(settings, None, None).window == 32_000
    own = {"window": 6_000, "threshold": 0.5, "compaction": False, "summary_model": "m"}
    rules = context.policy(settings, own, 128_000)
    assert rules == Policy(6_000, 0.5, 4096, False, "m", True, True)


@pytest.mark.parametrize(
    ("message", "window"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            8192,
        ),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200_000),
        ("exceeds the context window of 32,768 tokens", 32_768),
        ("Input is too long for requested model.", None),
    ],
)
def test_the_window_a_provider_s_overflow_error_states(message: str, window: int | None) -> None:
    assert window_in(message) == window


# --- what a compacted transcript sends ------------------------------------------------------------

BIG = "x" * 5_000


def _long_conversation() -> list[Entry]:
    """Three turns, each a tool call with a 5,000-character output and an answer."""
    entries: list[Entry] = []
    seq = 1
    for turn in range(3):
        call = ToolCall(f"call_{turn}", "fetch", "{}")
        entries += [
            user(seq, f"question {turn}"),
            calls(seq + 1, call),
            result(seq + 2, call, BIG),
            answer(seq + 3, f"answer {turn}"),
        ]
        seq += 4
    return entries


def test_eliding_sends_earlier_turns_outputs_as_references_the_entries_stay_whole() -> None:
    entries = [*_long_conversation(), user(13, "now")]
    transcript = Transcript("Be brief.", entries)
    before = transcript.estimate()
    size = transcript.size(RULES._replace(window=1_000), overflowed=False)
    assert size.elide_through == 12  # every turn before the current one
    transcript.compact(Compacted(1, elided_through=12))
    sent = transcript.provider_messages()
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools == [
        ELIDED_OUTPUT.format(chars=5_000, tool="fetch", call_id=f"call_{n}") for n in range(3)
    ]
    assert transcript.estimate() < before - size.elidable + 10
    assert [e.content for e in transcript if e.role == "tool"] == [BIG] * 3  # the planner's view


def test_the_current_turn_s_outputs_are_never_elided() -> None:
    call = ToolCall("call_now", "fetch", "{}")
    entries = [*_long_conversation(), user(13, "now"), calls(14, call), result(15, call, BIG)]
    transcript = Transcript(None, entries)
    size = transcript.size(RULES._replace(window=1_000))
    assert size.elide_through == 12
    transcript.compact(Compacted(1, elided_through=size.elide_through))
    assert transcript.provider_messages()[-1]["content"] == BIG


def test_a_summary_replaces_its_range_in_the_system_message() -> None:
    transcript = Transcript("Be brief.", [*_long_conversation(), user(13, "now")])
    size = transcript.size(RULES._replace(window=4_000))
    assert size.cut is not None
    assert size.cut[0] == 1
    transcript.compact(Compacted(1, summarized_through=size.cut[1], summary="They asked 3 times."))
    sent = transcript.provider_messages()
    assert sent[0]["role"] == "system"
    assert sent[0]["content"].startswith(
        "Be brief.\n\n" + SUMMARY_HEADING.format(through=size.cut[1])
    )
    assert sent[0]["content"].endswith("They asked 3 times.")
    assert sent[1]["role"] == "user"  # what is kept starts with a user message
    assert len(transcript) == 13  # the planner still sees every entry


def test_a_summary_inside_the_current_turn_still_sends_its_user_message_first() -> None:
    entries: list[Entry] = [user(1, "do the long task")]
    for n in range(6):
        call = ToolCall(f"call_{n}", "fetch", "{}")
        entries += [calls(2 + 2 * n, call), result(3 + 2 * n, call, BIG)]
    transcript = Transcript(None, entries)
    size = transcript.size(RULES._replace(window=4_000))
    assert size.cut is not None
    _, through = size.cut
    assert transcript.between(through, through)[0].role == "tool"  # ends after a result
    transcript.compact(Compacted(1, summarized_through=through, summary="Fetched a lot."))
    sent = transcript.provider_messages()
    assert [m["role"] for m in sent[:3]] == ["system", "user", "assistant"]
    assert sent[1]["content"] == "do the long task"
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_5", "content": BIG}  # kept whole
    assert transcript.estimate() <= size.kept_tokens


def _random_transcript(rng: random.Random) -> list[Entry]:
    entries: list[Entry] = []
    seq = 0
    for _ in range(rng.randint(1, 8)):
        seq += 1
        entries.append(user(seq, "q" * rng.randint(1, 3_000)))
        for _ in range(rng.randint(0, 4)):
            batch = [ToolCall(f"c{seq}_{k}", "fetch", "{}") for k in range(rng.randint(1, 3))]
            seq += 1
            entries.append(calls(seq, *batch))
            for call in batch:
                seq += 1
                entries.append(result(seq, call, "r" * rng.randint(0, 6_000)))
        if rng.random() < 0.7:
            seq += 1
            entries.append(answer(seq, "a" * rng.randint(1, 2_000)))
    return entries


@pytest.mark.parametrize("seed", range(40))
def test_compacting_until_it_fits_never_splits_a_call_from_its_result(seed: int) -> None:
    rng = random.Random(seed)
    transcript = Transcript("sys", _random_transcript(rng))
    rules = RULES._replace(window=rng.choice([2_000, 4_000, 8_000]))
    for _ in range(20):
        size = transcript.size(rules)
        decision = decide(size, rules, transcript.compacted)
        state = transcript.compacted
        match decision:
            case Elide(_, through):
                transcript.compact(state._replace(number=state.number + 1, elided_through=through))
            case Summarize(from_seq, through):
                assert from_seq == state.summarized_through + 1 or state.summarized_through == 0
                following = [e for e in transcript if e.seq > through]
                assert following and following[0].role in ("user", "assistant")
                transcript.compact(
                    state._replace(number=state.number + 1, summarized_through=through, summary="s")
                )
            case _:
                break
    _assert_valid(transcript.provider_messages())


def _assert_valid(sent: list[dict[str, object]]) -> None:
    """Every tool message answers a call of the assistant message before it; every call is
    answered; the first message after the system prompt is the user's."""
    assert sent[0]["role"] == "system"
    assert sent[1]["role"] == "user"
    open_calls: list[str] = []
    for message in sent[1:]:
        if message["role"] == "tool":
            assert open_calls and message["tool_call_id"] == open_calls.pop(0)
            continue
        assert not open_calls
        calls_of = message.get("tool_calls") or []
        open_calls = [call["id"] for call in calls_of]  # type: ignore[index, union-attr]


# --- how far the estimate is from a real tokenizer -----------------------------------------------


def _body(transcript: Transcript) -> dict[str, object]:
    return {"model": "m", "messages": transcript.provider_messages()}


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("prose", "The quick brown fox jumps over the lazy dog near the riverbank. "),
        ("json", json.dumps({"id": 1234, "name": "widget", "tags": ["a", "b"], "price": 9.99})),
        ("code", "def handler(event):\n    return {'status': event.get('code', 200)}\n"),
        ("numbers", "3.14159 2.71828 1.41421 1729 65537 "),
    ],
)
def test_the_estimate_errs_on_the_safe_side_of_a_real_tokenizer(kind: str, text: str) -> None:
    """On long transcripts (200 turns, a tool output each) the estimate is never under the
    count of o200k_base, and not far over it: the figures are printed."""
    entries: list[Entry] = []
    for turn in range(200):
        call = ToolCall(f"call_{turn}", "fetch", json.dumps({"page": turn}))
        seq = turn * 4
        entries += [
            user(seq + 1, f"Question {turn}: " + text * 3),
            calls(seq + 2, call),
            result(seq + 3, call, text * 40),
            answer(seq + 4, text * 5),
        ]
    transcript = Transcript("You are a careful assistant.", entries)
    real = count_prompt(_body(transcript))
    estimate = transcript.estimate()
    print(f"{kind}: estimate {estimate:,} tokens, o200k_base {real:,} ({estimate / real:.2f}x)")
    assert real <= estimate <= 1.7 * real
    # After a call, the provider's count replaces the estimate of what it was sent.
    transcript.observe(real)
    transcript.append(user(801, text * 10))
    grown = count_prompt(_body(transcript))
    assert (
        grown
        <= transcript.estimate()
        <= grown + 2 * count_prompt({"messages": [{"content": text * 10}]})
    )


@pytest.mark.row(18)
def test_what_is_sent_refers_to_the_cache_once_an_output_is_cut_elided_or_summarised() -> None:
    call = ToolCall("c1", "fetch", "{}")
    short = Transcript(None, [user(1), calls(2, call), result(3, call, "3")])
    assert not short.refers_to_cache
    cut = "x" * 100 + '\n[... The whole output is kept: call session_cache_get with {"id": "c1"}]'
    assert Transcript(None, [user(1), calls(2, call), result(3, call, cut)]).refers_to_cache
    assert Transcript(None, [user(1)], Compacted(1, elided_through=1)).refers_to_cache
    assert Transcript(None, [user(1)], Compacted(1, 0, 1, "s")).refers_to_cache
    short.compact(Compacted(1, elided_through=3))
    assert short.refers_to_cache


def test_deciding_reads_nothing_past_the_estimate_while_under_the_trigger() -> None:
    transcript = Transcript(None, _long_conversation())
    size = transcript.size(RULES)
    assert size == Size(size.tokens, 0, 0, None, size.tokens)
