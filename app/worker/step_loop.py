"""The step loop: plan -> act -> commit, one step at a time, until the claimed turn rests.

Every decision is the planner's (`app.worker.plan`); this module only acts on it and commits the
outcome in its own short transaction, fenced by the claim that `lease_runner` holds: the model
call is `model_call.ModelCaller`'s, a tool call `tool_call.ToolCaller`'s, the fitting of what the
model is sent `compactor.Compactor`'s. A user's cancel aborts the model or tool call in flight
(`in_flight`; the MCP server is told), and the planner then answers the calls left open and ends
the turn `cancelled`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from app.config import Settings
from app.telemetry import logs, metrics
from app.worker import failpoints, loop_bridge, plan
from app.worker.broadcast import Broadcaster
from app.worker.checker import SchemaChecker
from app.worker.compactor import Compactor
from app.worker.entry import Entry, ToolCall
from app.worker.in_flight import Aborted, InFlight
from app.worker.model_call import ModelCaller
from app.worker.outcome import Outcome
from app.worker.ports import (
    ModelClient,
    ModelReply,
    ModelRequest,
    ToolProvider,
    TurnStore,
    Usage,
)
from app.worker.steps import (
    CallModel,
    Cancel,
    Fail,
    Finish,
    RejectCall,
    RequireAction,
    RunOwnTool,
    RunTool,
    TakeSteer,
)
from app.worker.store import Committed, KeptOutput, Snapshot, Steering
from app.worker.threads import DatabaseThreads
from app.worker.tool_call import ToolCaller

log = logging.getLogger(__name__)


class Means(Protocol):
    """What every turn of a process shares (`lease_runner.TurnRunner` has it all)."""

    store: TurnStore
    model: ModelClient
    tools: ToolProvider
    settings: Settings
    db: DatabaseThreads
    broadcaster: Broadcaster
    checker: SchemaChecker


def next_seq(transcript: Sequence[Entry]) -> int:
    return transcript[-1].seq + 1 if transcript else 1


class StepLoop:
    """One run of one claimed conversation: the in-memory mirror of exactly what is committed."""

    def __init__(self, runner: Means, snapshot: Snapshot) -> None:
        self.runner = runner
        self.store = runner.store
        self.db = runner.db
        # a step's statement awaited on the loop, not on a database thread
        self.on_loop = runner.settings.database_io == "async" and runner.store.steps_on_loop
        self.snapshot = snapshot
        self.claim = snapshot.claim
        self.status = snapshot.status  # as last committed: the next write's `status.changed`
        self.transcript = snapshot.transcript
        self.iterations = snapshot.iterations
        self.model = snapshot.model  # the model the turn calls now (a fallback's once moved)
        self.cancel_requested = snapshot.cancel_requested
        # Turns submitted, as the last statement saw; past the ones checked, one may be a steer
        # message to take in (plan row 26): looked for once per new submit, not per step.
        self.turn_count = snapshot.turn_count
        self._checked = snapshot.turn_number
        self._steering: Steering | None = None
        self.in_flight = InFlight(self)  # the model or tool call awaited now
        self.compactor = Compactor(self)  # what the model is sent, fitted to its window
        self.tool_caller = ToolCaller(self)  # the tools offered, and running one call
        self.model_caller = ModelCaller(self)  # asking the model, committing its answer

    def request_cancel(self) -> None:
        """The user cancelled the turn: abort the call in flight; the planner does the rest."""
        self.cancel_requested = True
        self.in_flight.abort()

    async def drive(self) -> Outcome:
        await self.tool_caller.load()
        settings = self.runner.settings
        self.compactor.rules = self.compactor.context_rules()
        while True:
            await self._look_for_steer()
            action = plan.next_step(
                self.transcript,
                self.iterations,
                settings.max_iterations,
                tools=self.tool_caller.toolbox,
                cancel_requested=self.cancel_requested,
                steer_waiting=self._steering is not None,
            )
            match action:
                case TakeSteer():
                    await self._take_steer()
                case CallModel():
                    if self.transcript and self.transcript[-1].role == "tool":
                        failpoints.hit("results_committed")
                    outcome = await self.model_caller.call()
                    if outcome is not None:
                        return outcome
                case RunOwnTool(call, arguments):
                    await self.tool_caller.run_own(call, arguments)
                case RunTool(call, arguments, mark_in_flight):
                    await self.tool_caller.run_tool(call, arguments, mark_in_flight)
                case RejectCall(call, error):
                    await self.record_result(call, error, is_error=True)
                case RequireAction(actions):
                    waiting = {action.call.id for action in actions}
                    await self.commit(
                        self.store.pause,
                        self.claim,
                        status=self.status,
                        # Earlier pauses of the turn stay on record, answered.
                        actions=[
                            *(a for a in self.snapshot.actions if a["call_id"] not in waiting),
                            *(action.as_json() for action in actions),
                        ],
                    )
                    failpoints.hit("paused")
                    return Outcome.REQUIRES_ACTION
                case Finish():
                    await self.commit(self.store.finish, self.claim, status=self.status)
                    return Outcome.IDLE
                case Cancel():
                    await self.commit(self.store.cancel, self.claim, status=self.status)
                    return Outcome.CANCELLED
                case Fail(error):
                    await self.fail(error)
                    return Outcome.FAILED

    async def _look_for_steer(self) -> None:
        """A turn submitted since the last look may be a steer message waiting behind this one."""
        if self.turn_count > self._checked:
            self._checked = self.turn_count
            self._steering = await self.db.run(self.store.next_steer, self.claim.conversation_id)

    async def _take_steer(self) -> None:
        """Row 26: the steer message goes on the path, its turn carries the run on."""
        steering, self._steering = self._steering, None
        assert steering is not None
        ended = self.claim.turn_id
        failpoints.hit("steer_found")
        await self.commit(
            self.store.steer,
            self.claim,
            steering,
            status=self.status,
            seq=self.new_seq(),
            parent=self.leaf(),
            ttl=self.runner.settings.lease_ttl_seconds,
        )
        self.claim = replace(self.claim, turn_id=steering.turn_id)
        self.model = self.snapshot.primary_model or self.model  # (a new turn's own model)
        self._checked -= 1  # (a second steer message may wait behind this one: look again)
        # What the claim said of the ended turn (its pauses, approvals) is not the new one's.
        self.snapshot = replace(
            self.snapshot, claim=self.claim, first=True, actions=(), approved=frozenset()
        )
        logs.note_turn(steering.turn_id)
        metrics.TURNS_ENDED.labels(self.snapshot.model, "completed").inc()
        metrics.TURNS_STARTED.labels(self.snapshot.model).inc()
        log.info("turn %s steered: turn %s carries the run on", ended, steering.turn_id)
        failpoints.hit("steered")

    async def record_result(
        self,
        call: ToolCall,
        content: str,
        is_error: bool,
        kept: KeptOutput | None = None,
        *,
        files: Sequence[dict[str, Any]] = (),
    ) -> None:
        await self.commit(
            self.store.record_tool_result,
            self.claim,
            status=self.status,
            seq=self.new_seq(),
            parent=self.leaf(),
            call=call,
            content=content,
            is_error=is_error,
            ttl=self.runner.settings.lease_ttl_seconds,
            kept=kept,
            files=files,
        )

    async def fail(self, error: str, usage: Usage | None = None) -> None:
        await self.commit(self.store.fail, self.claim, error, status=self.status, usage=usage)

    async def ask_quietly(self, request: ModelRequest) -> ModelReply | None:
        """A model call of the worker's own (a summary): not streamed to the readers, aborted
        by the user's cancel (then None). `ModelError` when it failed."""
        try:
            return await self.in_flight.wait(self.runner.model.complete(request))
        except Aborted:
            return None

    async def commit(self, write: Callable[..., Committed], *args: Any, **values: Any) -> None:
        """Run one of the store's writes on a database thread (or, with
        `CHATWORKER_DATABASE_IO=async` and a driver that can, its statement awaited on the event
        loop); mirror what it committed, and wake the conversation's readers."""
        if self.on_loop:
            committed = await loop_bridge.run(write, *args, **values)
        else:
            committed = await self.db.run(write, *args, **values)
        self.runner.broadcaster.committed(self.claim.conversation_id, committed.event_seq)
        self.status = committed.status
        self.turn_count = committed.turn_count
        if committed.cancel_requested:
            self.cancel_requested = True
        if committed.entry is not None:
            self.transcript.append(committed.entry)

    def new_seq(self) -> int:
        """Past the path's last message and every other branch's (`Snapshot.free_seq`)."""
        return max(next_seq(self.transcript), self.snapshot.free_seq)

    def leaf(self) -> int | None:
        """The active path's last message: the parent of the next one."""
        return self.transcript[-1].seq if self.transcript else None


__all__ = ["Means", "Outcome", "StepLoop", "next_seq"]
