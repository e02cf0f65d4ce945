"""The user's answers to a turn that waits for them (`requires_action`), under the conversation's
row lock: each answer becomes the waiting call's result, and the last one hands the turn back to
the workers.

    the answer (call id, output)                 what the command writes
    -------------------------------------------  ---------------------------------------------------
    a call the turn never waited on              nothing: `ActionNotFound`
    a call answered already, with this output    nothing (a retried request)
    a call answered already, with another one    nothing: `ActionAlreadyAnswered` (a cancel's
      (or cancelled meanwhile)                     "cancelled" result counts as an answer)
    a waiting call                               its result (a tool message, `message.committed`)
    an approval: approve                         the decision in the turn's actions (the worker
                                                   runs the call when the turn goes on); if the
                                                   call is the one a stopped worker was running
                                                   (`conversations.in_flight`), that mark goes:
                                                   the user has settled its unknown outcome, and a
                                                   later stop during the new run asks again
    an approval: deny                            the decision, and the call's result: "Denied by
                                                   the user" (with the reason), an error the model
                                                   reads
    the same decision again                      nothing; the other one: `ActionAlreadyAnswered`
    ...the last waiting call of the turn         also: the turn `running`, the conversation
                                                   `processing` (`status.changed`): the caller
                                                   rings a worker, whose claim resumes the turn

One request is all or nothing: a refused answer refuses the whole request. A clarification
(`agent_clarify`) is answered the same way, or by the next message the user submits
(`intake.submit`): its text becomes the call's result, not a new user message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, case, null, select, update

from app.client.store.journal import append, insert_results, lock_conversation
from app.client.views import Decision
from app.errors import ActionAlreadyAnswered, ActionNotFound, InvalidRequest, TurnNotFound
from app.models import (
    APPROVAL,
    APPROVED,
    CLARIFICATION,
    DENIED,
    PROCESSING,
    REQUIRES_ACTION,
    RUNNING,
    STATUS_CHANGED,
    TOOL,
)
from app.models.tables import conversations, messages, turns


@dataclass(frozen=True)
class Answered:
    """What an answer did: the turn it answered, and whether the turn goes on (ring a worker)."""

    turn_id: uuid.UUID
    resumes: bool = False
    written: int = 0  # results committed by this request (0: all were answered before)


def answer_actions(
    connection: Connection,
    conversation_id: uuid.UUID,
    turn_id: uuid.UUID,
    outputs: Mapping[str, str],
    *,
    now: datetime,
    decisions: Mapping[str, Decision] | None = None,
) -> Answered:
    """Commit `outputs` (call id -> output) as the waiting calls' results, and `decisions`
    (call id -> approve or deny) on the calls that wait for approval (the module's table)."""
    decisions = decisions or {}
    both = set(outputs) & set(decisions)
    if both:
        raise InvalidRequest(f"call {sorted(both)[0]!r} is given an output and a decision")
    row = lock_conversation(connection, conversation_id)
    turn = connection.execute(
        select(turns.c.number, turns.c.status, turns.c.actions).where(
            turns.c.id == turn_id, turns.c.conversation_id == conversation_id
        )
    ).one_or_none()
    if turn is None:
        raise TurnNotFound(f"no turn {turn_id} in conversation {conversation_id}")
    judge = _Judge(turn_id, turn.status, turn.actions or ())
    judge.results = _results(connection, conversation_id, list(judge.waited))
    for call_id, output in outputs.items():
        judge.output(call_id, output)
    for call_id, decision in decisions.items():
        judge.decide(call_id, decision)
    if not judge.new and not judge.decided:
        return Answered(turn_id)
    logged = insert_results(
        connection,
        conversation_id,
        turn_id,
        [
            (action["call_id"], action["name"], output, action.get("decision") == DENIED)
            for action, output in judge.new
        ],
    )
    resumes = judge.resolved()
    turn_values: dict[str, Any] = {"actions": judge.actions} if judge.decided else {}
    values: dict[str, Any] = {"updated_at": now}
    if judge.approved:
        # An approval covers one run: the call's next run is marked in flight afresh.
        values["in_flight"] = case(
            (conversations.c.in_flight.in_(judge.approved), null()), else_=conversations.c.in_flight
        )
    if resumes:
        turn_values["status"] = RUNNING
        logged.append({"type": STATUS_CHANGED, "turn_id": turn_id, "status": PROCESSING})
        values.update(status=PROCESSING, heartbeat_at=now, attempts=0)
    if turn_values:
        connection.execute(update(turns).where(turns.c.id == turn_id).values(**turn_values))
    append(connection, conversation_id, row.event_seq, logged, **values)
    return Answered(turn_id, resumes=resumes, written=len(logged))


class _Judge:
    """Decides, answer by answer, what a request writes (or refuses it whole)."""

    def __init__(self, turn_id: uuid.UUID, status: str, actions: Sequence[Any]) -> None:
        self.turn_id = turn_id
        self.status = status
        self.actions = [dict(action) for action in actions]
        self.waited = {action["call_id"]: action for action in self.actions}
        self.results: dict[str, str | None] = {}
        self.new: list[tuple[dict[str, Any], str]] = []  # results to write
        self.decided = False
        self.approved: list[str] = []  # call ids approved by this request

    def output(self, call_id: str, output: str) -> None:
        action = self._action(call_id)
        if action["kind"] == APPROVAL:
            raise InvalidRequest(
                f"call {call_id!r} waits for approval: approve it (true) or deny it (false)"
            )
        if call_id in self.results:
            if self.results[call_id] != output:
                raise self._answered(call_id)
            return
        self._check_waiting()
        self.new.append((action, output))

    def decide(self, call_id: str, decision: Decision) -> None:
        action = self._action(call_id)
        if action["kind"] != APPROVAL:
            raise InvalidRequest(f"call {call_id!r} is a {action['kind']}: send its output")
        wanted = APPROVED if decision.approve else DENIED
        if action.get("decision") == wanted:
            return
        if action.get("decision") is not None or call_id in self.results:
            raise self._answered(call_id)
        self._check_waiting()
        action["decision"] = wanted
        self.decided = True
        if decision.approve:
            self.approved.append(call_id)
        else:
            self.new.append((action, denied_result(decision.reason)))

    def resolved(self) -> bool:
        """Every action has its result now, or was approved (the worker runs it)."""
        answered = set(self.results) | {action["call_id"] for action, _ in self.new}
        return all(
            call_id in answered or action.get("decision") == APPROVED
            for call_id, action in self.waited.items()
        )

    def _action(self, call_id: str) -> dict[str, Any]:
        action = self.waited.get(call_id)
        if action is None:
            known = f"; it waits for {', '.join(sorted(self.waited))}" if self.waited else ""
            raise ActionNotFound(f"turn {self.turn_id} waits for no call {call_id!r}{known}")
        return action

    def _check_waiting(self) -> None:
        if self.status != REQUIRES_ACTION:  # (its calls are all answered when it moves on)
            raise ActionAlreadyAnswered(f"turn {self.turn_id} is {self.status}, not waiting")

    def _answered(self, call_id: str) -> ActionAlreadyAnswered:
        return ActionAlreadyAnswered(
            f"call {call_id!r} of turn {self.turn_id} has its answer already; a call is "
            "answered once"
        )


def denied_result(reason: str | None) -> str:
    """What the model reads for a call the user denied."""
    why = f" The user said: {reason}" if reason else ""
    return f"Denied by the user: this call was not run.{why}"


def waiting_turn(connection: Connection, conversation_id: uuid.UUID, turn_number: int) -> Any:
    """The current turn (id, status, actions) when it waits for the user, else None."""
    turn = connection.execute(
        select(turns.c.id, turns.c.status, turns.c.actions).where(
            turns.c.conversation_id == conversation_id, turns.c.number == turn_number
        )
    ).one_or_none()
    return turn if turn is not None and turn.status == REQUIRES_ACTION else None


def open_clarifications(connection: Connection, conversation_id: uuid.UUID, turn: Any) -> list[str]:
    """The waiting turn's clarification calls that have no answer yet."""
    asked = [a["call_id"] for a in turn.actions or () if a["kind"] == CLARIFICATION]
    answered = _results(connection, conversation_id, asked)
    return [call_id for call_id in asked if call_id not in answered]


def _results(
    connection: Connection, conversation_id: uuid.UUID, call_ids: Sequence[str]
) -> dict[str, str | None]:
    """The committed results of these calls, by call id."""
    if not call_ids:
        return {}
    rows = connection.execute(
        select(messages.c.tool_call_id, messages.c.content).where(
            messages.c.conversation_id == conversation_id,
            messages.c.role == TOOL,
            messages.c.tool_call_id.in_(list(call_ids)),
        )
    ).all()
    return {row.tool_call_id: row.content for row in rows}


__all__ = [
    "Answered",
    "Decision",
    "answer_actions",
    "denied_result",
    "open_clarifications",
    "waiting_turn",
]
