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

from app.client.views import EventView, MessageView, TurnView
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
    cut = _Cut(turn)
    for event in events:
        cut.take(event)
    return cut.steps


class _Cut:
    def __init__(self, turn: TurnView) -> None:
        self.turn = turn
        self.steps: list[Step] = []
        self.mark: datetime | None = None  # when the last step ended: the next starts there
        self.paused: EventView | None = None  # the pause going on

    def take(self, event: EventView) -> None:
        at = event.created_at
        if event.type == TURN_QUEUED:
            self.mark = at
        elif event.type in (TURN_STARTED, TURN_RESUMED):
            if event.type == TURN_STARTED:
                self._queued_until(at)
            kind = "claimed" if event.type == TURN_STARTED else "resumed"
            self.steps.append(Step(kind, at, at, {"attempt": event.attempt}))
            self.mark = at
        elif event.type == MESSAGE_COMMITTED and event.message is not None:
            self._committed(event.message, at)
        elif event.type == ACTION_REQUIRED:
            self.paused = event
        elif event.type in (CONTEXT_COMPACTED, MODEL_FALLBACK):
            kind = "compacted" if event.type == CONTEXT_COMPACTED else "fallback"
            self.steps.append(Step(kind, at, at, dict(event.data or {})))
        elif event.type in TERMINAL_EVENTS:
            self._queued_until(at)  # (it ended before any worker took it)
            self._unpause(at, {})  # (it ended while it waited: a cancel)
            detail = {"status": self.turn.status, "error": self.turn.error}
            self.steps.append(Step("ended", at, at, detail))

    def _committed(self, message: MessageView, at: datetime) -> None:
        if self.paused is not None and message.role in ("tool", "user"):
            self._unpause(at, {"answered": message.seq})
        else:
            step = _message_step(message, self.mark or at, at)
            if step is not None:
                self.steps.append(step)
        self.mark = at

    def _queued_until(self, at: datetime) -> None:
        if not self.steps and self.mark is not None:
            self.steps.append(Step("queued", self.mark, at))

    def _unpause(self, at: datetime, detail: dict[str, Any]) -> None:
        if self.paused is not None:
            self.steps.append(Step("paused", self.paused.created_at, at, detail))
            self.paused = None


def _message_step(message: MessageView, started: datetime, ended: datetime) -> Step | None:
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
