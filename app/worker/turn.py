"""Running a turn: claim the conversation, then plan -> act -> commit, one step at a time, until
it rests (`idle` or `failed`). A fresh turn and a resumed one are the same call.

Every decision is the planner's (`app.worker.plan`); this module only acts on it (calls the model,
runs one tool) and commits the outcome in its own short transaction. While it waits on the model or
a tool, a heartbeat renews the lease; if the lease is lost the run is cancelled and writes nothing.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable
from typing import Any

from app.config import Settings
from app.models import PROCESSING
from app.worker import failpoints, plan
from app.worker.plan import (
    CallModel,
    Fail,
    Finish,
    RecordAnswer,
    RecordCalls,
    RejectCall,
    RunTool,
    ToolCall,
)
from app.worker.ports import ModelClient, ModelError, ModelRequest, ToolProvider, Usage
from app.worker.store import Claim, Committed, LeaseLost, Snapshot, TurnStore
from app.worker.threads import DatabaseThreads

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    IDLE = "idle"
    FAILED = "failed"
    NOT_CLAIMED = "not_claimed"  # nothing to do, or another worker owns it
    LEASE_LOST = "lease_lost"  # another worker took over mid-run; this one wrote nothing more


class TurnRunner:
    """Runs conversations to their next resting state, with what every turn of a process shares:
    the store, the model, the tools, the settings and the database threads."""

    def __init__(
        self,
        store: TurnStore,
        *,
        model: ModelClient,
        tools: ToolProvider,
        settings: Settings,
        owner: str,
        db: DatabaseThreads | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.tools = tools
        self.settings = settings
        self.owner = owner
        self.db = db or DatabaseThreads()

    async def run(self, conversation_id: uuid.UUID) -> Outcome:
        """Claim the conversation and drive it until it rests; resume whatever is committed.

        A turn that ends while another waits behind it leaves the conversation `processing`
        with no lease: the next turn is claimed at once (the outcome is the last turn's)."""
        while True:
            outcome, next_waits = await self._run_turn(conversation_id)
            if not next_waits:
                return outcome

    async def _run_turn(self, conversation_id: uuid.UUID) -> tuple[Outcome, bool]:
        snapshot = await self.db.run(
            self.store.claim, conversation_id, self.owner, self.settings.lease_ttl_seconds
        )
        if snapshot is None:
            return Outcome.NOT_CLAIMED, False
        claim = snapshot.claim
        gave_up = plan.on_claim(snapshot.attempts, self.settings.max_attempts)
        if gave_up is not None:
            failed = await self.db.run(
                self.store.fail, claim, gave_up.error, status=snapshot.status
            )
            return Outcome.FAILED, failed.status == PROCESSING
        failpoints.hit("after_claim")
        lost = asyncio.Event()
        beating = asyncio.create_task(self._heartbeat(claim, asyncio.current_task(), lost))
        turn = _Turn(self, snapshot)
        try:
            return await turn.drive(), turn.status == PROCESSING
        except LeaseLost:
            log.warning("conversation %s: lease lost, stopping without writing", conversation_id)
            return Outcome.LEASE_LOST, False
        except asyncio.CancelledError:
            if lost.is_set():
                log.warning("conversation %s: lease lost while waiting, stopped", conversation_id)
                return Outcome.LEASE_LOST, False
            await asyncio.shield(self._release(claim))
            raise
        finally:
            beating.cancel()

    async def _heartbeat(
        self, claim: Claim, runner: asyncio.Task[Any] | None, lost: asyncio.Event
    ) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                await self.db.run(self.store.heartbeat, claim, self.settings.lease_ttl_seconds)
            except LeaseLost:
                lost.set()
                if runner is not None:
                    runner.cancel()
                return
            except Exception:  # the database may be back before the lease runs out
                log.exception("conversation %s: heartbeat failed", claim.conversation_id)

    async def _release(self, claim: Claim) -> None:
        try:
            await self.db.run(self.store.release, claim)
        except LeaseLost:
            pass
        except Exception:  # the lease expires by itself; recovery picks the turn up then
            log.exception("conversation %s: could not release the lease", claim.conversation_id)


class _Turn:
    """One run of one conversation: the in-memory mirror of exactly what is committed."""

    def __init__(self, runner: TurnRunner, snapshot: Snapshot) -> None:
        self.runner = runner
        self.store = runner.store
        self.db = runner.db
        self.snapshot = snapshot
        self.claim = snapshot.claim
        self.status = snapshot.status  # as last committed: the next write's `status.changed`
        self.transcript = snapshot.transcript
        self.iterations = snapshot.iterations
        self.function_tools: list[dict[str, Any]] = []  # what the model is offered, built once
        self.toolbox = plan.NO_TOOLS

    async def drive(self) -> Outcome:
        await self._load_tools()
        settings = self.runner.settings
        while True:
            action = plan.next_action(
                self.transcript, self.iterations, settings.max_iterations, tools=self.toolbox
            )
            match action:
                case CallModel():
                    if self.transcript[-1].role == "tool":
                        failpoints.hit("results_committed")
                    outcome = await self._call_model()
                    if outcome is not None:
                        return outcome
                case RunTool(call, arguments):
                    result = await self.runner.tools.execute(call.name, arguments)
                    failpoints.hit("tool_ran", call.name)
                    await self._record_result(call, result.content, result.is_error)
                case RejectCall(call, error):
                    await self._record_result(call, error, is_error=True)
                case Finish():
                    await self._commit(self.store.finish, self.claim, status=self.status)
                    return Outcome.IDLE
                case Fail(error):
                    await self._fail(error)
                    return Outcome.FAILED

    async def _load_tools(self) -> None:
        allowed = self.snapshot.allowed_tools
        if not plan.uses_tools(allowed, self.snapshot.tool_choice):
            return  # the simple path: the model gets no tools, so one call answers
        definitions = await self.runner.tools.definitions()
        self.toolbox = plan.toolbox(allowed, (d.name for d in definitions))
        self.function_tools = [
            d.as_function_tool() for d in definitions if d.name in self.toolbox.offered
        ]

    async def _call_model(self) -> Outcome | None:
        """Ask the model, commit what the planner makes of its answer; an outcome if it rests."""
        request = ModelRequest(
            model=self.snapshot.model,
            messages=self.transcript.provider_messages(),
            tools=self.function_tools,
            tool_choice=self.snapshot.tool_choice,
        )
        try:
            reply = await self.runner.model.complete(request)
        except ModelError as exc:
            await self._fail(plan.model_failed(str(exc)).error)
            return Outcome.FAILED
        failpoints.hit("llm_answered")
        seq = self._next_seq()
        verdict = plan.judge_reply(
            reply.content,
            reply.tool_calls,
            reply.finish_reason,
            used_ids=self.transcript.call_ids,
            seq=seq,
        )
        match verdict:
            case RecordCalls(calls):
                await self._commit(
                    self.store.record_tool_calls,
                    self.claim,
                    status=self.status,
                    seq=seq,
                    content=reply.content,
                    calls=calls,
                    usage=reply.usage,
                    ttl=self.runner.settings.lease_ttl_seconds,
                    finish_reason=reply.finish_reason,
                )
                self.iterations += 1
                failpoints.hit("tool_calls_committed")
                return None
            case RecordAnswer(content):
                await self._commit(
                    self.store.record_answer,
                    self.claim,
                    status=self.status,
                    seq=seq,
                    content=content,
                    usage=reply.usage,
                    finish_reason=reply.finish_reason,
                )
                failpoints.hit("final_committed")
                return Outcome.IDLE
            case Fail(error):
                await self._fail(error, reply.usage)
                return Outcome.FAILED

    async def _record_result(self, call: ToolCall, content: str, is_error: bool) -> None:
        await self._commit(
            self.store.record_tool_result,
            self.claim,
            status=self.status,
            seq=self._next_seq(),
            call=call,
            content=content,
            is_error=is_error,
            ttl=self.runner.settings.lease_ttl_seconds,
        )

    async def _fail(self, error: str, usage: Usage | None = None) -> None:
        await self._commit(self.store.fail, self.claim, error, status=self.status, usage=usage)

    async def _commit(self, write: Callable[..., Committed], *args: Any, **values: Any) -> None:
        """Run one of the store's writes on a database thread; mirror what it committed."""
        committed = await self.db.run(write, *args, **values)
        self.status = committed.status
        if committed.entry is not None:
            self.transcript.append(committed.entry)

    def _next_seq(self) -> int:
        return self.transcript[-1].seq + 1 if self.transcript else 1


__all__ = ["Outcome", "TurnRunner"]
