"""**No I/O**: the context budget. How big the next request is, whether it fits the model's window,
and what to compact when it does not (rows 19-25 of `plan`'s table).

    the next model call                                         decided
    ----------------------------------------------------------  ----------------------------------
19  compaction off, or the model's window is unknown (and no    send it as it is (an overflow
    overflow taught it yet)                                       fails the turn, row 25)
20  the request fits under the trigger (threshold x window,     send it
    less the room kept for the reply), and no overflow
21  tool outputs of earlier turns not yet elided (the session   Elide: they are sent as their
    cache is on)                                                  reference from now on
22  a range of the oldest messages can be summarised (it ends   Summarize(from, through): a model
    before a user message, or before an assistant message of      call writes the summary, then it
    the current turn; it keeps the turn's open calls whole)       is committed (one more step)
23  nothing left to compact, and the estimate is over twice     Fail(TOO_LARGE): a single message
    the window (it errs high by 1.9x at most: it cannot fit)      or output is larger than that
24  nothing left to compact otherwise                           send it: the provider decides
                                                                  (an overflow: row 25)
25  the provider said it was too long (`overflowed`) after this  Fail(the overflow): compaction off,
    turn had compacted for an overflow already, or with             or it did not help
    compaction off

An overflow from the provider (its `ContextWindowExceededError`) counts as "over the trigger"
whatever the estimate said (rows 21-23), once per turn: a second one fails (row 25).

**The estimate** never tokenises the history: each entry's size is estimated once, as it is
appended (`Transcript`), from the kinds of bytes of its text (`text_tokens`: a letter counts 1/3.5
of a token, an upper-case one 0.8 more, a digit or punctuation 0.9, a byte of a non-ASCII
character 0.35), which errs high for every kind of text measured against o200k_base (prose 1.16x,
code 1.38x, JSON 1.27-1.57x, numbers 1.29x, hex 1.15x, base64 1.05x, Chinese 1.91x;
`tests/unit/test_context.py`), where a flat characters-per-token ratio is under for JSON and
numbers or far over for prose. After a model call, the provider's own `prompt_tokens` for what it
was sent replaces the estimate of that part: the next estimate is that count plus the estimate of
the entries added since.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

MESSAGE_TOKENS = 4  # a message's own framing (role, separators)
CALL_TOKENS = 10  # a tool call's framing, besides its name and arguments
SUMMARY_TOKENS = 1_000  # the most a summary may take (and what the budget counts for it)
SUMMARY_SHARE = 0.1  # ... and at most this share of the window
SUMMARY_INPUT_SHARE = 0.6  # of the window: the most one summary request reads
KEEP_SHARE = 0.5  # of the trigger: how much of the recent transcript a summary keeps whole
TOO_LARGE_MARGIN = 2.0  # an estimate over this many windows cannot fit (row 23)
ELIDE_MIN_CHARS = 300  # shorter tool outputs are sent as they are (a reference saves nothing)

_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))
_UPPER = bytes(range(65, 91))
_SPACES = b" \t\n\r"
_HIGH = bytes(range(128, 256))

TOO_LARGE_ERROR = (
    "The conversation no longer fits the model's context window of {window:,} tokens, even "
    "compacted: what cannot be summarised (the current turn's message and its latest tool calls "
    "and results) is about {tokens:,} tokens. Start a new conversation, or send a shorter "
    "message."
)
OVERFLOW_ERROR = "The request is larger than the model's context window ({detail}); {why}"
COMPACTION_OFF = (
    "compaction is off (CHATWORKER_COMPACTION=false, or the conversation's "
    "context_policy.compaction)"
)
DID_NOT_HELP = "it was compacted once for this turn and still did not fit"
NOTHING_LEFT = "nothing is left to compact"


class Policy(NamedTuple):
    """What a conversation's requests must fit (the settings, overridden by its policy)."""

    window: int | None  # the model's input window in tokens; None: unknown
    threshold: float = 0.8
    reply_tokens: int = 4096
    compaction: bool = True
    summary_model: str | None = None  # None: the conversation's model
    prompt_cache: bool = True
    elide: bool = True  # the session cache keeps outputs, so an elided one can be read again

    @property
    def reserve(self) -> int:
        """Tokens kept for the reply: at most a quarter of the window."""
        return min(self.reply_tokens, (self.window or 0) // 4)

    @property
    def limit(self) -> int:
        """The most a request may take and still leave the reply its room."""
        return (self.window or 0) - self.reserve

    @property
    def trigger(self) -> int:
        """A request above this many tokens is compacted first."""
        return min(int((self.window or 0) * self.threshold), self.limit)


def policy(settings: Any, overrides: dict[str, Any] | None, window: int | None) -> Policy:
    """The policy from the settings (`ContextSettings`), the model's known window, and the
    conversation's `context_policy` (already checked by the client when it was stored)."""
    found = overrides or {}
    return Policy(
        window=found.get("window") or window or settings.context_window,
        threshold=float(found.get("threshold") or settings.context_threshold),
        reply_tokens=int(found.get("reply_tokens") or settings.context_reply_tokens),
        compaction=bool(found.get("compaction", settings.compaction)),
        summary_model=found.get("summary_model") or settings.compaction_model,
        prompt_cache=bool(found.get("prompt_cache", settings.prompt_cache)),
        elide=bool(settings.session_cache),
    )


def text_tokens(text: str | None) -> int:
    """The estimate of `text` in tokens, on the safe side (the module's figures): four passes
    of `bytes.translate` in C, ~2 us a thousand characters."""
    if not text:
        return 0
    data = text.encode()
    size = len(data)
    non_letters = len(data.translate(None, _LETTERS))
    upper = size - len(data.translate(None, _UPPER))
    spaces = size - len(data.translate(None, _SPACES))
    high = size - len(data.translate(None, _HIGH))
    dense = non_letters - spaces - high
    letters = size - non_letters
    return math.ceil(letters / 3.5 + upper * 0.8 + dense * 0.9 + high * 0.35)


class Compacted(NamedTuple):
    """What is compacted as of the latest committed compaction (its `number`; 0: none yet)."""

    number: int = 0
    elided_through: int = 0  # tool outputs of messages up to this seq go as references
    summarized_through: int = 0  # messages up to this seq are replaced by `summary`
    summary: str | None = None


NOT_COMPACTED = Compacted()


class Size(NamedTuple):
    """What the transcript says of the next request, for the decision (`Transcript.size`)."""

    tokens: int  # the estimate of the whole request
    elidable: int  # tokens an Elide would save (0: nothing to elide)
    elide_through: int  # the seq it would elide through (the message before the current turn)
    cut: tuple[int, int] | None  # the range (from_seq, through_seq) a summary would replace
    kept_tokens: int  # the estimate after that summary


# --- decisions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Elide:
    """Send earlier turns' tool outputs as references from now on (no model call)."""

    from_seq: int
    through: int


@dataclass(frozen=True)
class Summarize:
    """Summarise messages `from_seq..through` (with any earlier summary): a model call, then
    one committed step."""

    from_seq: int
    through: int


@dataclass(frozen=True)
class TooLarge:
    """Nothing left to compact and the request still does not fit: the turn fails."""

    error: str


Decision = Elide | Summarize | TooLarge | None


def decide(
    size: Size,
    rules: Policy,
    compacted: Compacted,
    *,
    overflowed: bool = False,
    retried: bool = False,
    overflow_detail: str = "",
) -> Decision:
    """Rows 19-25: what to do before the next model call (None: send it as it is).

    `overflowed`: the provider refused the last request as too long; `retried`: this turn
    compacted for an overflow already."""
    if overflowed and (not rules.compaction or retried):
        return _overflow(overflow_detail, COMPACTION_OFF if not rules.compaction else DID_NOT_HELP)
    if not rules.compaction or (rules.window is None and not overflowed):
        return None  # row 19
    if not overflowed and size.tokens <= rules.trigger:
        return None  # row 20
    return _compaction(size, rules, compacted, overflowed, overflow_detail)


def _compaction(
    size: Size, rules: Policy, compacted: Compacted, overflowed: bool, detail: str
) -> Decision:
    """Rows 21-24: the cheapest compaction left, or whether the request may go as it is."""
    if rules.elide and size.elidable > 0:
        return Elide(compacted.elided_through + 1, size.elide_through)
    if size.cut is not None:
        return Summarize(*size.cut)
    if overflowed:
        return _overflow(detail, NOTHING_LEFT)
    if rules.window is not None and size.tokens > rules.window * TOO_LARGE_MARGIN:
        return TooLarge(TOO_LARGE_ERROR.format(window=rules.window, tokens=size.tokens))
    return None


def _overflow(detail: str, why: str) -> TooLarge:
    return TooLarge(OVERFLOW_ERROR.format(detail=detail or "said the provider", why=why))


def keep_target(rules: Policy, tokens: int) -> int:
    """How many tokens a request may keep after a summary: half the trigger (half of what it
    has when the window is unknown)."""
    return int(rules.trigger * KEEP_SHARE) if rules.window else tokens // 2


def summary_tokens(rules: Policy) -> int:
    """The most tokens a summary may take: `SUMMARY_TOKENS`, less in a small window."""
    if rules.window is None:
        return SUMMARY_TOKENS
    return min(SUMMARY_TOKENS, int(rules.window * SUMMARY_SHARE))


def summary_input_tokens(rules: Policy) -> int:
    """The most tokens one summary request reads (the rest waits for the next one)."""
    return int((rules.window or 8_000) * SUMMARY_INPUT_SHARE)


# --- what a provider's overflow error says --------------------------------------------------

_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*) tokens"),  # OpenAI, vLLM, most gateways
    re.compile(r"(\d[\d,]*) tokens > (\d[\d,]*) maximum"),  # Anthropic: "prompt is too long"
    re.compile(r"context window of (\d[\d,]*) tokens"),
)


def window_in(message: str) -> int | None:
    """The window an overflow error states, if it states one."""
    for pattern in _WINDOW_PATTERNS:
        found = pattern.search(message)
        if found is not None:
            return int(found.groups()[-1].replace(",", ""))
    return None


__all__ = [
    "MESSAGE_TOKENS",
    "NOT_COMPACTED",
    "Compacted",
    "Decision",
    "Elide",
    "Policy",
    "Size",
    "Summarize",
    "TooLarge",
    "decide",
    "keep_target",
    "policy",
    "summary_input_tokens",
    "summary_tokens",
    "text_tokens",
    "window_in",
]
