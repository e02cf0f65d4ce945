"""The ChatService: the shell that runs the planner's decisions, committing one step at a time.

`run(conversation_id)` claims the conversation, loads what is committed, and repeats: ask the pure
planner, do that one thing (call the model, or run one tool), commit its outcome in its own short
transaction. A fresh turn and a resumed one are the same call. While it waits on the model or a
tool, a heartbeat renews the lease; if the lease is lost the run is cancelled and writes nothing.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from app.worker import failpoints, plan
from app.worker.plan import CallModel, Fail, Finish, RunTools, ToolCall
from app.worker.ports import ModelClient, ModelError, ModelRequest, ToolDefinition, ToolProvider
from app.worker.store import Claim, LeaseLost, Snapshot, Store

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

GAVE_UP_ERROR = (
    "Gave up after {attempts} attempts: the worker stopped each time before this turn could "
    "commit its next step (a tool or model call may be crashing the worker)"
)


class Outcome(enum.Enum):
    IDLE = "idle"
    FAILED = "failed"
    NOT_CLAIMED = "not_claimed"  # nothing to do, or another worker owns it
    LEASE_LOST = "lease_lost"  # another worker took over mid-run; this one wrote nothing more


@dataclass(frozen=True)
class LoopConfig:
    max_iterations: int = 20
    lease_ttl: float = 30.0
    heartbeat_interval: float = 10.0
    max_attempts: int = 3
    max_error_rounds: int = plan.MAX_ERROR_ROUNDS


class ChatService:
    """Runs conversations to their next resting state (`idle` or `failed`)."""

    def __init__(
        self,
        store: Store,
        *,
        model: ModelClient,
        tools: ToolProvider,
        config: LoopConfig,
        owner: str,
        executor: Executor | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.tools = tools
        self.config = config
        self.owner = owner
        self.executor = executor

    async def run(self, conversation_id: uuid.UUID) -> Outcome:
        """Claim the conversation and drive it until it rests; resume whatever is committed."""
        snapshot = await self.db(
            self.store.claim, conversation_id, self.owner, self.config.lease_ttl
        )
        if snapshot is None:
            return Outcome.NOT_CLAIMED
        claim = snapshot.claim
        if snapshot.attempts > self.config.max_attempts:
            await self.db(
                self.store.fail, claim, GAVE_UP_ERROR.format(attempts=snapshot.attempts - 1)
            )
            return Outcome.FAILED
        failpoints.hit("after_claim")
        lost = asyncio.Event()
        beating = asyncio.create_task(self._heartbeat(claim, asyncio.current_task(), lost))
        try:
            return await _Turn(self, snapshot).drive()
        except LeaseLost:
            log.warning("conversation %s: lease lost, stopping without writing", conversation_id)
            return Outcome.LEASE_LOST
        except asyncio.CancelledError:
            if lost.is_set():
                log.warning("conversation %s: lease lost while waiting, stopped", conversation_id)
                return Outcome.LEASE_LOST
            await asyncio.shield(self._release(claim))
            raise
        finally:
            beating.cancel()

    async def _heartbeat(
        self, claim: Claim, runner: asyncio.Task[Any] | None, lost: asyncio.Event
    ) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            try:
                await self.db(self.store.heartbeat, claim, self.config.lease_ttl)
            except LeaseLost:
                lost.set()
                if runner is not None:
                    runner.cancel()
                return
            except Exception:  # the database may be back before the lease runs out
                log.exception("conversation %s: heartbeat failed", claim.conversation_id)

    async def _release(self, claim: Claim) -> None:
        try:
            await self.db(self.store.release, claim)
        except LeaseLost:
            pass
        except Exception:  # the lease expires by itself; recovery picks the turn up then
            log.exception("conversation %s: could not release the lease", claim.conversation_id)

    async def db(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a store call on the executor, so a slow query never stalls other conversations."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: function(*args, **kwargs))


class _Turn:
    """One run of one conversation: the in-memory mirror of exactly what is committed."""

    def __init__(self, service: ChatService, snapshot: Snapshot) -> None:
        self.service = service
        self.snapshot = snapshot
        self.claim = snapshot.claim
        self.transcript = snapshot.transcript
        self.iterations = snapshot.iterations
        self.offered: dict[str, ToolDefinition] = {}
        self.known: set[str] = set()

    async def drive(self) -> Outcome:
        await self._load_tools()
        config = self.service.config
        while True:
            action = plan.next_action(
                self.transcript, self.iterations, config.max_iterations, config.max_error_rounds
            )
            match action:
                case CallModel():
                    if self.transcript[-1].role == "tool":
                        failpoints.hit("results_committed")
                    outcome = await self._call_model()
                    if outcome is not None:
                        return outcome
                case RunTools(calls):
                    for call in calls:
                        await self._run_tool(call)
                case Finish():
                    await self.db(self.service.store.finish, self.claim)
                    return Outcome.IDLE
                case Fail(error):
                    await self.db(self.service.store.fail, self.claim, error)
                    return Outcome.FAILED

    async def _load_tools(self) -> None:
        snapshot = self.snapshot
        wanted = set(snapshot.allowed_tools)
        if not wanted or snapshot.tool_choice == "none":
            return  # the simple path: the model gets no tools, so one call answers
        definitions = await self.service.tools.definitions()
        self.known = {d.name for d in definitions}
        self.offered = {d.name: d for d in definitions if d.name in wanted}

    async def _call_model(self) -> Outcome | None:
        snapshot = self.snapshot
        request = ModelRequest(
            model=snapshot.model,
            messages=self.transcript.provider_messages(),
            tools=[d.as_function_tool() for d in self.offered.values()],
            tool_choice=snapshot.tool_choice,
        )
        try:
            reply = await self.service.model.complete(request)
        except ModelError as exc:
            await self.db(self.service.store.fail, self.claim, str(exc))
            return Outcome.FAILED
        failpoints.hit("llm_answered")
        store, seq = self.service.store, self._next_seq()
        if reply.finish_reason == "content_filter":
            await self.db(store.fail, self.claim, plan.CONTENT_FILTER_ERROR, reply.usage)
            return Outcome.FAILED
        if reply.tool_calls:
            calls = plan.unique_tool_calls(reply.tool_calls, self.transcript.call_ids, seq)
            entry = await self.db(
                store.record_tool_calls,
                self.claim,
                seq=seq,
                content=reply.content,
                calls=calls,
                usage=reply.usage,
                ttl=self.service.config.lease_ttl,
                finish_reason=reply.finish_reason,
            )
            self.transcript.append(entry)
            self.iterations += 1
            failpoints.hit("tool_calls_committed")
            return None
        if not (reply.content or "").strip():
            await self.db(store.fail, self.claim, plan.EMPTY_REPLY_ERROR, reply.usage)
            return Outcome.FAILED
        entry = await self.db(
            store.record_answer,
            self.claim,
            seq,
            reply.content or "",
            reply.usage,
            reply.finish_reason,
        )
        self.transcript.append(entry)
        failpoints.hit("final_committed")
        return Outcome.IDLE

    async def _run_tool(self, call: ToolCall) -> None:
        asked_by = next(e for e in reversed(self.transcript) if e.role == "assistant")
        cut_off = asked_by.finish_reason == "length"
        checked = plan.check_call(call, self.offered, self.known, cut_off)
        if isinstance(checked, str):
            content, is_error = checked, True
        else:
            result = await self.service.tools.execute(call.name, checked)
            content, is_error = result.content, result.is_error
            failpoints.hit("tool_ran", call.name)
        entry = await self.db(
            self.service.store.record_tool_result,
            self.claim,
            seq=self._next_seq(),
            call=call,
            content=content,
            is_error=is_error,
            ttl=self.service.config.lease_ttl,
        )
        self.transcript.append(entry)

    def _next_seq(self) -> int:
        return self.transcript[-1].seq + 1 if self.transcript else 1

    async def db(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.service.db(function, *args, **kwargs)


__all__ = ["GAVE_UP_ERROR", "ChatService", "LoopConfig", "Outcome"]
