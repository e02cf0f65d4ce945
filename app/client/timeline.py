"""A turn's timeline: what it did, step by step, and where its time went, read from what was
committed (its events, each with its time and the message it names). Pure: `turn_record` reads
the rows, this cuts them into steps.

    step          from                                  to
    ------------  ------------------------------------  ---------------------------------------
    queued        turn.queued (the submit)              its first claim
    claimed       turn.started (attempt 1)              (an instant: a worker took it)
    resumed       turn.resumed (a later claim: the      (an instant; `attempt` says which)
                  worker before it died or stopped)
    model_call    the claim, or the last committed      the assistant message it wrote: its
                  step before it                        tokens, cost, finish reason, its calls
    tool_call     the step before its result            its result: the tool, error or not
    paused        action.required (the user's turn)     the answer that ended the pause
    compacted     context.compacted                     (an instant; `data` says how)
    fallback      model.fallback                        (an instant; from, to, why)
    ended         turn.completed / failed / cancelled   (an instant; the turn's error)

A step's `duration_ms` is the time between the commits that bound it, so a model call's includes
the worker's own work around it: the timings of each call inside a step (first token, retries)
are the step's `detail` where the worker recorded them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.client.views import EventView, TurnView
from app.vocabulary import (
    ACTION_REQUIRED,
    CONTEXT_COMPACTED,
    MESSAGE_COMMITTED,
    MODEL_FALLBACK,
    TERMINAL_EVENTS,
    TURN_QUEUED,
    TURN_RESUMED,
    TURN_STARTED,
)


@dataclass(frozen=True)
class Step:
    kind: str
    started_at: datetime
    ended_at: datetime
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> int:
        return max(0, round((self.ended_at - self.started_at).total_seconds() * 1000))


def timeline(turn: TurnView, events: Sequence[EventView]) -> list[Step]:
    """The turn's steps, in order (its events, each `created_at` the commit that made it)."""
    steps: list[Step] = []
    mark: datetime | None = None  # when the last step ended: the next one starts there
    paused: EventView | None = None
    for event in events:
        at = event.created_at
        if event.type == TURN_QUEUED:
            mark = at
            continue
        if event.type in (TURN_STARTED, TURN_RESUMED):
            if event.type == TURN_STARTED and mark is not None and not steps:
                steps.append(Step("queued", mark, at))
            kind = "claimed" if event.type == TURN_STARTED else "resumed"
            steps.append(Step(kind, at, at, {"attempt": event.attempt}))
            mark = at
        elif event.type == MESSAGE_COMMITTED and event.message is not None:
            message = event.message
            if paused is not None and message.role in ("tool", "user"):
                steps.append(Step("paused", paused.created_at, at, {"answered": message.seq}))
                paused = None
                mark = at
                continue
            step = _message_step(message, mark or at, at)
            if step is not None:
                steps.append(step)
            mark = at
        elif event.type == ACTION_REQUIRED:
            paused = event
        elif event.type == CONTEXT_COMPACTED:
            steps.append(Step("compacted", at, at, dict(event.data or {})))
        elif event.type == MODEL_FALLBACK:
            steps.append(Step("fallback", at, at, dict(event.data or {})))
        elif event.type in TERMINAL_EVENTS:
            if not steps and mark is not None:  # (it ended before any worker took it)
                steps.append(Step("queued", mark, at))
            if paused is not None:  # (it ended while it waited: a cancel)
                steps.append(Step("paused", paused.created_at, at, {}))
                paused = None
            detail = {"status": turn.status, "error": turn.error}
            steps.append(Step("ended", at, at, detail))
    return steps


def _message_step(message: Any, started: datetime, ended: datetime) -> Step | None:
    if message.role == "assistant":
        calls = [call.get("name") for call in message.tool_calls or ()]
        detail = {
            "seq": message.seq,
            "usage": dict(message.usage or {}),
            "tool_calls": calls,
            "chars": len(message.content or ""),
        }
        return Step("model_call", started, ended, detail)
    if message.role == "tool":
        detail = {"seq": message.seq, "tool": message.tool_name, "error": bool(message.is_error)}
        return Step("tool_call", started, ended, detail)
    return None  # (the user's message: the turn's input, not a step)


def as_json(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "kind": step.kind,
            "started_at": step.started_at.isoformat(),
            "ended_at": step.ended_at.isoformat(),
            "duration_ms": step.duration_ms,
            "detail": step.detail,
        }
        for step in steps
    ]


__all__ = ["Step", "as_json", "timeline"]
