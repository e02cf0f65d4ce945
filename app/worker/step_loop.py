"""The step loop: plan -> act -> commit, one step at a time, until the claimed turn rests.

Every decision is the planner's (`app.worker.plan`); this module only acts on it (calls the model,
runs one tool) and commits the outcome in its own short transaction, fenced by the claim that
`lease_runner` holds. A user's cancel aborts the model or tool call in flight (the MCP server is
told), and the planner then answers the calls left open and ends the turn `cancelled`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any, Protocol, TypeVar

from app.config import Settings
from app.models import BUILTIN_TOOL_NAMES
from app.telemetry import logs, metrics, tracing
from app.worker import (
    builtin,
    context,
    failpoints,
    files,
    loop_bridge,
    offer,
    plan,
    session_cache,
    structured,
)
from app.worker.arguments import ArgumentCheck
from app.worker.broadcast import Broadcaster, ReplyStream
from app.worker.checker import SchemaChecker
from app.worker.compactor import Compactor
from app.worker.outcome import Outcome
from app.worker.plan import (
    CallModel,
    Cancel,
    Entry,
    Fail,
    Finish,
    RejectCall,
    RequireAction,
    RunOwnTool,
    RunTool,
    TakeSteer,
    ToolCall,
)
from app.worker.ports import (
    NO_SINK,
    CallRef,
    ContextOverflow,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    ReplySink,
    ToolProvider,
    ToolResult,
    TurnStore,
    Usage,
)
from app.worker.store import Committed, KeptOutput, Snapshot, Steering
from app.worker.threads import DatabaseThreads
from app.worker.verdict import (
    FallBack,
    RecordAnswer,
    RecordCalls,
    RecordRefused,
    Verdict,
    judge_reply,
    model_failed,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class Means(Protocol):
    """What every turn of a process shares (`lease_runner.TurnRunner` has it all)."""

    store: TurnStore
    model: ModelClient
    tools: ToolProvider
    settings: Settings
    db: DatabaseThreads
    broadcaster: Broadcaster
    checker: SchemaChecker


CANCELLED = "cancelled by the user"
FAILED_CALL = "the model call failed"
NOT_COMMITTED = "the reply could not be committed"
REFUSED = "the answer did not match the output schema; asking the model again"


class _Aborted(Exception):
    """The user's cancel aborted the model or tool call the turn was waiting on."""


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
        self.function_tools: list[dict[str, Any]] = []  # what the model is offered, built once
        self.toolbox = offer.NO_TOOLS
        self.tool_servers: dict[str, str] = {}  # the server of each offered tool (for traces)
        self.cancel_requested = snapshot.cancel_requested
        # Turns submitted, as the last statement saw; past the ones checked, one may be a steer
        # message to take in (plan row 26): looked for once per new submit, not per step.
        self.turn_count = snapshot.turn_count
        self._checked = snapshot.turn_number
        self._steering: Steering | None = None
        self._in_flight: asyncio.Future[Any] | None = None  # the model or tool call awaited now
        self._readers = False  # the session cache's readers are offered
        # the files this run sent, as the requests hold them (None: not the conversation's)
        self._inlined: dict[files.FileRef, str | None] = {}
        self.compactor = Compactor(self)  # what the model is sent, fitted to its window

    def request_cancel(self) -> None:
        """The user cancelled the turn: abort the call in flight; the planner does the rest."""
        self.cancel_requested = True
        if self._in_flight is not None:
            self._in_flight.cancel()

    async def drive(self) -> Outcome:
        await self._load_tools()
        settings = self.runner.settings
        self.compactor.rules = self.compactor.context_rules()
        while True:
            await self._look_for_steer()
            action = plan.next_step(
                self.transcript,
                self.iterations,
                settings.max_iterations,
                tools=self.toolbox,
                cancel_requested=self.cancel_requested,
                steer_waiting=self._steering is not None,
            )
            match action:
                case TakeSteer():
                    await self._take_steer()
                case CallModel():
                    if self.transcript and self.transcript[-1].role == "tool":
                        failpoints.hit("results_committed")
                    outcome = await self._call_model()
                    if outcome is not None:
                        return outcome
                case RunOwnTool(call, arguments):
                    result = await self._read_cache(call.name, arguments)
                    await self.record_result(call, result.content, result.is_error)
                case RunTool(call, arguments, mark_in_flight):
                    await self._run_tool(call, arguments, mark_in_flight)
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
            seq=self._next_seq(),
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

    async def _interruptible(self, call: Awaitable[T]) -> T:
        """Await `call` so that the user's cancel can abort it (`_Aborted`). A cancel of the
        whole run (shutdown, a lost lease) still propagates as itself."""
        task = asyncio.ensure_future(call)
        self._in_flight = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            run_cancelled = current is not None and current.cancelling() > 0
            if task.cancelled() and self.cancel_requested and not run_cancelled:
                raise _Aborted from None
            raise
        finally:
            self._in_flight = None

    async def _load_tools(self) -> None:
        snapshot, settings = self.snapshot, self.runner.settings
        self._readers = self._cache_readable()
        allowed = snapshot.allowed_tools
        names = [*allowed, *(str(tool["name"]) for tool in snapshot.client_tools)]
        if not offer.uses_tools(names, snapshot.tool_choice):
            return  # the simple path: the model gets no tools, so one call answers
        own, action_kinds = builtin.toolset(
            snapshot.client_tools, snapshot.clarify and settings.clarify
        )
        readers = builtin.cache_definitions(settings.tool_context_chars)
        servers = await self.runner.tools.definitions()
        box = offer.toolbox(
            allowed,
            (d.name for d in servers),
            None,
            action_kinds,
            cache=(d.name for d in readers),
            session_cache=self._readers,
            reserved=BUILTIN_TOOL_NAMES,
            approved=snapshot.approved,
            in_flight=snapshot.in_flight,
            in_flight_policy=settings.in_flight_recovery,
        )
        served = [d for d in servers if d.name in box.served]
        offered = [*served, *own, *(d for d in readers if d.name in box.own)]
        # What the tools the planner offers say of themselves: schemas and annotations.
        self.toolbox = box._replace(
            check=ArgumentCheck({d.name: d.input_schema for d in offered}),
            approval=frozenset(
                d.name for d in offered if d.requires_approval or d.name in snapshot.approval_tools
            ),
            guarded=frozenset(d.name for d in served if not d.may_rerun),
        )
        # In one order whatever the servers' (the prefix a prompt cache matches stays the same).
        self.function_tools = [
            d.as_function_tool() for d in sorted(offered, key=attrgetter("name"))
        ]
        self.tool_servers = {d.name: d.server for d in offered}
        self.transcript.tools_tokens = context.text_tokens(json.dumps(self.function_tools))

    def _cache_readable(self) -> bool:
        """Row 18: the cache's readers serve once what is sent refers to the cache."""
        return self.runner.settings.session_cache and self.transcript.refers_to_cache

    async def _call_model(self) -> Outcome | None:
        """Ask the model, commit what the planner makes of its answer; an outcome if it rests.
        Its reply is streamed to the live channel as it forms, and flushed before the commit.
        A used-up budget (checked against the committed totals) fails the turn instead."""
        if self.snapshot.budgeted:
            used_up = await self.db.run(self.store.budget_used_up, self.claim.conversation_id)
            over = plan.over_budget(used_up)
            if over is not None:
                await self.fail(over.error)
                return Outcome.FAILED
        if await self.compactor.fit():
            return Outcome.FAILED
        if self.cancel_requested:
            return None  # cancelled while summarising: the planner ends the turn
        if self._readers != self._cache_readable():
            await self._load_tools()  # an output was cut or elided: the readers serve now
        request = await self._with_files(self._request())
        seq = self._next_seq()
        sink = self.runner.broadcaster.reply(self.claim.conversation_id, seq)
        settled = False  # the reply was committed, or its stream already abandoned
        try:
            outcome = await self._ask(request, sink, seq)
            settled = True
            return outcome
        finally:
            if not settled:  # a lost lease, a shutdown: the reply will not be committed here
                sink.abandon(NOT_COMMITTED)

    def _request(self) -> ModelRequest:
        """The next model call: the transcript as sent, the tools, the cache's key, and the
        turn's schema (as a `response_format` the model takes, else told in a system message)."""
        messages = self.transcript.provider_messages()
        schema = self.snapshot.output_schema
        response_format = None
        if schema is not None:
            if self.runner.model.takes_schema(self.model):
                response_format = structured.response_format(schema)
            else:
                messages.append({"role": "system", "content": structured.instruction(schema)})
        return ModelRequest(
            model=self.model,
            messages=messages,
            tools=self.function_tools,
            tool_choice=self.snapshot.tool_choice,
            cache_key=str(self.claim.conversation_id)
            if self.compactor.rules.prompt_cache
            else None,
            response_format=response_format,
        )

    async def _with_files(self, request: ModelRequest) -> ModelRequest:
        """The request with the bytes of the files its user messages carry, read once a run."""
        if not self.transcript.has_files:
            return request  # (the common case: nothing to read, nothing to copy)
        media = self.runner.model.takes_file(self.model, "image")
        named = files.wanted(request.messages, media=media)
        if not named:
            if media:
                return request
            return replace(request, messages=files.resolve(request.messages, {}, media=False))
        missing = named - self._inlined.keys()
        if missing:
            ids = {ref.file_id for ref in missing if ref.file_id is not None}
            found = await self.db.run(self.store.read_files, self.claim.conversation_id, ids)
            for ref in missing:
                data = found.get(ref.file_id)
                self._inlined[ref] = (
                    None if data is None else files.inline(ref.media_type, ref.name, data)
                )
        messages = files.resolve(request.messages, self._inlined, media=media)
        return replace(request, messages=messages)

    def _models(self) -> tuple[str, ...]:
        """The conversation's model, then the ones it falls back to, in order."""
        fallbacks = self.snapshot.fallback_models
        if fallbacks is None:
            fallbacks = self.runner.settings.fallback_models
        return (self.snapshot.primary_model or self.snapshot.model, *fallbacks)

    async def _fall_back(self, model: str, error: str) -> None:
        """Row 30: the turn moves to `model`, committed (a resumed turn goes on with it)."""
        await self.commit(
            self.store.fall_back,
            self.claim,
            from_model=self.model,
            to_model=model,
            error=error,
            ttl=self.runner.settings.lease_ttl_seconds,
        )
        log.warning("turn %s: %s failed, falling back to %s", self.claim.turn_id, self.model, model)
        metrics.MODEL_FALLBACKS.labels(self.model, model).inc()
        self.model = model
        self.compactor.rules = self.compactor.context_rules()  # (the new model's window)
        failpoints.hit("fell_back")

    async def _ask(self, request: ModelRequest, sink: ReplyStream, seq: int) -> Outcome | None:
        with tracing.model_span(request.model) as span:
            try:
                reply = await self._interruptible(
                    self.runner.model.complete(request, self._sink(sink))
                )
            except _Aborted:
                span.set_attribute("chatworker.cancelled", True)
                sink.abandon(CANCELLED)
                return None  # cancelled while the model was answering: the planner ends the turn
            except ContextOverflow as exc:
                tracing.failed(span, str(exc), "ContextOverflow")
                sink.abandon(FAILED_CALL)
                self.compactor.overflowed(exc)
                return None  # the next plan calls the model again, compacted first (row 25)
            except ModelError as exc:
                tracing.failed(span, str(exc), "ModelError")
                sink.abandon(FAILED_CALL)
                failed = model_failed(
                    str(exc),
                    may_fall_back=exc.may_fall_back,
                    using=self.model,
                    models=self._models(),
                )
                if isinstance(failed, FallBack):
                    await self._fall_back(failed.model, str(exc))
                    return None  # the next plan calls the model again, the fallback's
                await self.fail(failed.error)
                return Outcome.FAILED
            usage = reply.usage
            tracing.model_answered(
                span, usage.prompt_tokens, usage.completion_tokens, reply.finish_reason
            )
        sink.flush()
        self.transcript.observe(usage.prompt_tokens)
        failpoints.hit("llm_answered", reply.content)
        verdict = judge_reply(
            reply.content,
            reply.tool_calls,
            reply.finish_reason,
            used_ids=_calls_taken(self.transcript.call_ids, self.snapshot.other_calls),
            seq=seq,
            judged=await self.runner.checker.judged(reply, self.snapshot.output_schema),
        )
        return await self._record(verdict, reply, sink, seq)

    async def _record(
        self, verdict: Verdict, reply: ModelReply, sink: ReplyStream, seq: int
    ) -> Outcome | None:
        """Commit what the planner made of a reply (rows 11-14, 27); an outcome if it rests."""
        match verdict:
            case RecordCalls(calls):
                await self.commit(
                    self.store.record_tool_calls,
                    self.claim,
                    status=self.status,
                    seq=seq,
                    parent=self.leaf(),
                    content=reply.content,
                    calls=calls,
                    usage=reply.usage,
                    ttl=self.runner.settings.lease_ttl_seconds,
                    finish_reason=reply.finish_reason,
                    reply_stream=sink.shape(),
                    model=self.model,
                )
                self.iterations += 1
                failpoints.hit("tool_calls_committed")
                return None
            case RecordAnswer(content, output):
                await self.commit(
                    self.store.record_answer,
                    self.claim,
                    status=self.status,
                    seq=seq,
                    parent=self.leaf(),
                    content=content,
                    usage=reply.usage,
                    finish_reason=reply.finish_reason,
                    reply_stream=sink.shape(),
                    model=self.model,
                    output=output,
                )
                failpoints.hit("final_committed")
                return Outcome.IDLE
            case RecordRefused(content, error):
                sink.abandon(REFUSED)  # (readers drop it: the model is asked again)
                await self.commit(
                    self.store.record_refused,
                    self.claim,
                    status=self.status,
                    seq=seq,
                    parent=self.leaf(),
                    content=content,
                    error=error,
                    usage=reply.usage,
                    ttl=self.runner.settings.lease_ttl_seconds,
                    finish_reason=reply.finish_reason,
                    model=self.model,
                )
                self.iterations += 1
                failpoints.hit("answer_refused")
                return None  # the planner asks for a repair, or fails the turn
            case Fail(error):
                sink.abandon(error)
                await self.fail(error, reply.usage)
                return Outcome.FAILED

    async def _run_tool(
        self, call: ToolCall, arguments: dict[str, Any], mark_in_flight: bool
    ) -> None:
        """Run an MCP call and commit its result; a call that may not simply run again is
        marked in flight first. A user's cancel aborts it, and commits nothing."""
        if mark_in_flight:
            ttl = self.runner.settings.lease_ttl_seconds
            await self.commit(self.store.starting, self.claim, call.id, ttl)
        started = time.monotonic()
        with tracing.tool_span(call.name, call.id, self.tool_servers.get(call.name)) as span:
            try:
                result = await self._interruptible(
                    self.runner.tools.execute(
                        call.name, arguments, CallRef(self.claim.conversation_id, call.id)
                    )
                )
            except _Aborted:
                metrics.TOOL_CALLS.labels(call.name, "cancelled").inc()
                span.set_attribute("chatworker.tool.outcome", "cancelled")
                return  # the planner answers the call "cancelled by the user"
            span.set_attribute("chatworker.tool.outcome", result.kind)
            if result.is_error:
                tracing.failed(span, result.content, result.kind)
        metrics.TOOL_CALL_SECONDS.labels(call.name).observe(time.monotonic() - started)
        metrics.TOOL_CALLS.labels(call.name, result.kind).inc()
        failpoints.hit("tool_ran", call.name)
        await self._record_output(call, arguments, result)

    async def _record_output(
        self, call: ToolCall, arguments: dict[str, Any], result: ToolResult
    ) -> None:
        """An MCP call's result: the model's context gets at most `tool_context_chars` of it;
        with the session cache on, the whole is kept beside it, in the same statement."""
        settings = self.runner.settings
        limit = settings.tool_context_chars
        kept_files: list[dict[str, Any]] = []
        if result.media:  # images, audio, blobs: kept whole, as files of the conversation
            kept_files = await self.db.run(
                self.store.keep_files, self.claim.conversation_id, result.media
            )
        if not settings.session_cache:
            content = session_cache.truncate(result.content, limit)
            await self.record_result(call, content, result.is_error, files=kept_files)
            return
        content = session_cache.compact(call.id, result.content, limit)
        kept = KeptOutput(arguments, result.content)
        await self.record_result(call, content, result.is_error, kept, files=kept_files)

    async def _read_cache(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """`session_cache_list` or `session_cache_get`, answered from the kept outputs."""
        conversation_id = self.claim.conversation_id
        if name == session_cache.LIST:
            tool = arguments.get("tool")
            listed, total = await self.db.run(
                self.store.cached_outputs, conversation_id, tool=tool, limit=session_cache.LISTED
            )
            return session_cache.listing(listed, total, tool)
        request = session_cache.page_request(arguments, self.runner.settings.tool_context_chars)
        found = await self.db.run(
            self.store.cached_output,
            conversation_id,
            request.call_id,
            offset=request.offset,
            limit=request.limit,
        )
        return session_cache.page(request, found)

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
            seq=self._next_seq(),
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
            return await self._interruptible(self.runner.model.complete(request))
        except _Aborted:
            return None

    def _sink(self, stream: ReplySink) -> ReplySink:
        return stream if self.runner.broadcaster.channel is not None else NO_SINK

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

    def _next_seq(self) -> int:
        """Past the path's last message and every other branch's (`Snapshot.free_seq`)."""
        return max(next_seq(self.transcript), self.snapshot.free_seq)

    def leaf(self) -> int | None:
        """The active path's last message: the parent of the next one."""
        return self.transcript[-1].seq if self.transcript else None


def _calls_taken(on_path: set[str], elsewhere: frozenset[str]) -> set[str] | frozenset[str]:
    """The call ids a new call's may not repeat: the path's and other branches' results'."""
    return on_path | elsewhere if elsewhere else on_path


__all__ = ["Means", "Outcome", "StepLoop", "next_seq"]
