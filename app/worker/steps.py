"""The steps the planner decides: `plan.next_step` returns one `Step`, a plain value the step
loop's one `match` acts on (`step_loop.StepLoop.drive`); the rows each answers are the table in
the header of `plan.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from app.worker.entry import ToolCall


@dataclass(frozen=True)
class CallModel:
    """Send the transcript to the model; `verdict.judge_reply` decides what its answer commits."""


@dataclass(frozen=True)
class TakeSteer:
    """Row 26: take the steer message waiting behind the turn in before the model is called."""


@dataclass(frozen=True)
class RunTool:
    """Execute this call with these (checked) arguments and commit its result on its own; with
    `mark_in_flight`, commit the call `in_flight` first (its tool may not simply run again)."""

    call: ToolCall
    arguments: dict[str, Any]
    mark_in_flight: bool = False


@dataclass(frozen=True)
class RunOwnTool:
    """Answer this call of the worker's own tools (the session cache's) from the store, and
    commit the answer like a tool result. Read-only: a crash simply runs it again."""

    call: ToolCall
    arguments: dict[str, Any]


@dataclass(frozen=True)
class RejectCall:
    """Commit `error` as this call's result without running it; the model reads why."""

    call: ToolCall
    error: str


class PendingAction(NamedTuple):
    """A call the turn waits on: its kind (`clarification`, `client_tool`, `approval`), checked
    arguments, and why it is asked when that is not obvious (`reason`)."""

    call: ToolCall
    kind: str
    arguments: dict[str, Any]
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        found = {
            "call_id": self.call.id,
            "kind": self.kind,
            "name": self.call.name,
            "arguments": self.arguments,
        }
        return found if self.reason is None else {**found, "reason": self.reason}


@dataclass(frozen=True)
class RequireAction:
    """Every unanswered call waits for the user or their client: the turn requires action
    (lease released, nothing running) until the web side commits their results."""

    actions: tuple[PendingAction, ...]


@dataclass(frozen=True)
class Finish:
    """The turn's final answer is committed: the conversation goes idle."""


@dataclass(frozen=True)
class Fail:
    """The turn cannot go on: the conversation fails with this error."""

    error: str


@dataclass(frozen=True)
class Cancel:
    """The user cancelled the turn and every call is answered: the turn ends `cancelled`."""


Step = (
    CallModel
    | TakeSteer
    | RunTool
    | RunOwnTool
    | RejectCall
    | RequireAction
    | Finish
    | Fail
    | Cancel
)


__all__ = [
    "CallModel",
    "Cancel",
    "Fail",
    "Finish",
    "PendingAction",
    "RejectCall",
    "RequireAction",
    "RunOwnTool",
    "RunTool",
    "Step",
    "TakeSteer",
]
