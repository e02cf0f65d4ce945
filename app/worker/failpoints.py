"""Failpoints: named places in the worker where a test makes the process SIGKILL itself, or
makes the run raise (a crash of the worker's own step code, not of the process).

    CHATWORKER_FAILPOINT="tool_ran"            the first time the point is reached
    CHATWORKER_FAILPOINT="tool_ran:3"          the third time
    CHATWORKER_FAILPOINT="tool_ran@write_note" only when that tool is the one involved
    CHATWORKER_FAILPOINT="llm_answered@POISON=raise"   raise `FailpointRaised` every time the
                                               model answers exactly "POISON" (`=raise`: from
                                               the n-th time on, the process lives)
    CHATWORKER_FAILPOINT="after_claim,tool_ran:2"   several points

Read once at import; when unset, `hit()` returns at its first line (the hot path pays one check).
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from dataclasses import dataclass

ENV = "CHATWORKER_FAILPOINT"

POINTS = {
    "job_received": "the actor got the doorbell; the processing claim is not committed",
    "after_claim": "the claim is committed; the LLM has not been called",
    "llm_answered": "the LLM answer is received; nothing of it is committed",
    "tool_calls_committed": "the assistant tool calls and tool_loop are committed; no tool started",
    "tool_ran": "a tool ran (its side effect happened); its result is not committed",
    "results_committed": "every tool result is committed; the next LLM call has not started",
    "final_committed": "the final text and idle are committed",
    "before_ack": "the host has the doorbell; dramatiq has not acknowledged the message",
    "paused": "the turn's pause (requires_action, lease released) is committed",
    "webhook_sent": "a webhook's receiver answered 2xx; its delivery is not recorded",
    "compaction_summarized": "a compaction's summary came back from the model; nothing of it "
    "is committed",
    "compacted": "a compaction (context.compacted) is committed; the model call it made room "
    "for has not started",
    "steer_found": "a steer message waits behind the turn and will be taken in; nothing of it "
    "is committed",
    "steered": "the steer message is committed and its turn carries the run on; the model has "
    "not been called",
    "fell_back": "the turn's move to a fallback model (model.fallback) is committed; the "
    "fallback has not been called",
    "answer_refused": "an answer that does not match the turn's schema is committed (is_error); "
    "the model has not been asked to repair it",
}
#: The points every turn with tools reaches (the crash matrix); `paused` only a waiting one,
#: `webhook_sent` only a delivery, the compaction's only a conversation that outgrew its window,
#: the steer's only a turn a message steers, a fallback's only a failing model, a refusal's only
#: an answer that misses its schema.
MATRIX_POINTS = tuple(
    point
    for point in POINTS
    if point
    not in (
        "paused",
        "webhook_sent",
        "compaction_summarized",
        "compacted",
        "steer_found",
        "steered",
        "fell_back",
        "answer_refused",
    )
)


class FailpointRaised(RuntimeError):
    """What a `=raise` failpoint raises: the worker's step code crashed."""


@dataclass(frozen=True)
class Failpoint:
    point: str
    nth: int = 1
    tool: str | None = None  # (for `llm_answered`: the model's answer)
    raises: bool = False


def parse(spec: str) -> tuple[Failpoint, ...]:
    """`point[:n][@tool][=raise]`, comma-separated; an unknown point is an error, not a silent
    no-op."""
    armed = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        named, _, action = item.partition("=")
        if action not in ("", "raise"):
            raise ValueError(f"{ENV}: unknown action {action!r} (only `=raise`)")
        rest, _, tool = named.partition("@")
        point, _, nth = rest.partition(":")
        if point not in POINTS:
            raise ValueError(f"{ENV}: unknown failpoint {point!r}; known: {', '.join(POINTS)}")
        armed.append(Failpoint(point, int(nth) if nth else 1, tool or None, action == "raise"))
    return tuple(armed)


ARMED = parse(os.environ.get(ENV, ""))
_reached: Counter[tuple[str, str | None]] = Counter()


def hit(point: str, tool: str | None = None) -> None:
    """Die (or raise) here if a failpoint names this point (and this tool, and this
    occurrence)."""
    if not ARMED:
        return
    for failpoint in ARMED:
        if failpoint.point != point or (failpoint.tool is not None and failpoint.tool != tool):
            continue
        key = (point, failpoint.tool)
        _reached[key] += 1
        if failpoint.raises and _reached[key] >= failpoint.nth:
            raise FailpointRaised(f"failpoint {point} raised")
        if _reached[key] == failpoint.nth:
            print(f"failpoint {point} reached: SIGKILL", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
