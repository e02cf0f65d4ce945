"""Calling the model for a run, and committing what the planner makes of its answer (rows 8,
10-14, 27 and 30): a used-up budget fails the turn first; what is sent is fitted to the window
(`compactor.Compactor`) and carries the turn's files and schema; the reply streams to the live
channel as it forms, and `verdict.judge_reply` decides the one step it commits. A user's cancel
aborts the call, and the planner ends the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from app.telemetry import metrics, tracing
from app.worker import failpoints, files, offer, plan, structured
from app.worker.broadcast import ReplyStream
from app.worker.compactor import Compactor
from app.worker.in_flight import Aborted, InFlight
from app.worker.outcome import Outcome
from app.worker.ports import (
    NO_SINK,
    ContextOverflow,
    ModelError,
    ModelReply,
    ModelRequest,
    ReplySink,
    TurnStore,
    Usage,
)
from app.worker.steps import Fail
from app.worker.store import Claim, Committed, Snapshot
from app.worker.threads import DatabaseThreads
from app.worker.tool_call import ToolCaller
from app.worker.transcript import Transcript
from app.worker.verdict import (
    FallBack,
    RecordAnswer,
    RecordCalls,
    RecordRefused,
    Verdict,
    judge_reply,
    model_failed,
)

if TYPE_CHECKING:
    from app.worker.step_loop import Means

log = logging.getLogger(__name__)

CANCELLED = "cancelled by the user"
FAILED_CALL = "the model call failed"
NOT_COMMITTED = "the reply could not be committed"
REFUSED = "the answer did not match the output schema; asking the model again"


class Run(Protocol):
    """What the model calls need of the run they serve (`step_loop.StepLoop`)."""

    runner: Means
    store: TurnStore
    db: DatabaseThreads
    snapshot: Snapshot
    claim: Claim
    status: str
    transcript: Transcript
    iterations: int
    cancel_requested: bool
    model: str  # the model the turn calls now
    compactor: Compactor
    tool_caller: ToolCaller
    in_flight: InFlight

    async def commit(self, write: Callable[..., Committed], *args: Any, **values: Any) -> None: ...

    async def fail(self, error: str, usage: Usage | None = None) -> None: ...

    def new_seq(self) -> int: ...

    def leaf(self) -> int | None: ...


class ModelCaller:
    def __init__(self, run: Run) -> None:
        self.run = run
        # the files this run sent, as the requests hold them (None: not the conversation's)
        self._inlined: dict[files.FileRef, str | None] = {}

    async def call(self) -> Outcome | None:
        """Ask the model, commit what the planner makes of its answer; an outcome if it rests.
        Its reply is streamed to the live channel as it forms, and flushed before the commit.
        A used-up budget (checked against the committed totals) fails the turn instead."""
        run = self.run
        if run.snapshot.budgeted:
            used_up = await run.db.run(run.store.budget_used_up, run.claim.conversation_id)
            over = plan.over_budget(used_up)
            if over is not None:
                await run.fail(over.error)
                return Outcome.FAILED
        if await run.compactor.fit():
            return Outcome.FAILED
        if run.cancel_requested:
            return None  # cancelled while summarising: the planner ends the turn
        await run.tool_caller.refresh()
        request = await self._with_files(self._request())
        seq = run.new_seq()
        sink = run.runner.broadcaster.reply(run.claim.conversation_id, seq)
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
        run = self.run
        messages = run.transcript.provider_messages()
        schema = run.snapshot.output_schema
        response_format = None
        if schema is not None:
            if run.runner.model.takes_schema(run.model):
                response_format = structured.response_format(schema)
            else:
                messages.append({"role": "system", "content": structured.instruction(schema)})
        return ModelRequest(
            model=run.model,
            messages=messages,
            tools=run.tool_caller.function_tools,
            tool_choice=offer.tool_choice(
                run.snapshot.tool_choice,
                run.snapshot.forced_tool,
                run.tool_caller.toolbox.offered,
                run.transcript,
            ),
            cache_key=str(run.claim.conversation_id) if run.compactor.rules.prompt_cache else None,
            response_format=response_format,
        )

    async def _with_files(self, request: ModelRequest) -> ModelRequest:
        """The request with the bytes of the files its user messages carry, read once a run."""
        run = self.run
        if not run.transcript.has_files:
            return request  # (the common case: nothing to read, nothing to copy)
        media = run.runner.model.takes_file(run.model, "image")
        named = files.wanted(request.messages, media=media)
        if not named:
            if media:
                return request
            return replace(request, messages=files.resolve(request.messages, {}, media=False))
        missing = named - self._inlined.keys()
        if missing:
            ids = {ref.file_id for ref in missing if ref.file_id is not None}
            found = await run.db.run(run.store.read_files, run.claim.conversation_id, ids)
            for ref in missing:
                data = found.get(ref.file_id)
                self._inlined[ref] = (
                    None if data is None else files.inline(ref.media_type, ref.name, data)
                )
        messages = files.resolve(request.messages, self._inlined, media=media)
        return replace(request, messages=messages)

    def _models(self) -> tuple[str, ...]:
        """The conversation's model, then the ones it falls back to, in order."""
        snapshot = self.run.snapshot
        fallbacks = snapshot.fallback_models
        if fallbacks is None:
            fallbacks = self.run.runner.settings.fallback_models
        return (snapshot.primary_model or snapshot.model, *fallbacks)

    async def _fall_back(self, model: str, error: str) -> None:
        """Row 30: the turn moves to `model`, committed (a resumed turn goes on with it)."""
        run = self.run
        await run.commit(
            run.store.fall_back,
            run.claim,
            from_model=run.model,
            to_model=model,
            error=error,
            ttl=run.runner.settings.lease_ttl_seconds,
        )
        log.warning("turn %s: %s failed, falling back to %s", run.claim.turn_id, run.model, model)
        metrics.MODEL_FALLBACKS.labels(run.model, model).inc()
        run.model = model
        run.compactor.rules = run.compactor.context_rules()  # (the new model's window)
        failpoints.hit("fell_back")

    async def _ask(self, request: ModelRequest, sink: ReplyStream, seq: int) -> Outcome | None:
        run = self.run
        with tracing.model_span(request.model) as span:
            try:
                reply = await run.in_flight.wait(
                    run.runner.model.complete(request, self._sink(sink))
                )
            except Aborted:
                span.set_attribute("chatworker.cancelled", True)
                sink.abandon(CANCELLED)
                return None  # cancelled while the model was answering: the planner ends the turn
            except ContextOverflow as exc:
                tracing.failed(span, str(exc), "ContextOverflow")
                sink.abandon(FAILED_CALL)
                run.compactor.overflowed(exc)
                return None  # the next plan calls the model again, compacted first (row 25)
            except ModelError as exc:
                tracing.failed(span, str(exc), "ModelError")
                sink.abandon(FAILED_CALL)
                failed = model_failed(
                    str(exc),
                    may_fall_back=exc.may_fall_back,
                    using=run.model,
                    models=self._models(),
                )
                if isinstance(failed, FallBack):
                    await self._fall_back(failed.model, str(exc))
                    return None  # the next plan calls the model again, the fallback's
                await run.fail(failed.error)
                return Outcome.FAILED
            usage = reply.usage
            tracing.model_answered(
                span, usage.prompt_tokens, usage.completion_tokens, reply.finish_reason
            )
        sink.flush()
        run.transcript.observe(usage.prompt_tokens)
        failpoints.hit("llm_answered", reply.content)
        verdict = judge_reply(
            reply.content,
            reply.tool_calls,
            reply.finish_reason,
            used_ids=_calls_taken(run.transcript.call_ids, run.snapshot.other_calls),
            seq=seq,
            judged=await run.runner.checker.judged(reply, run.snapshot.output_schema),
        )
        return await self._record(verdict, reply, sink, seq)

    async def _record(
        self, verdict: Verdict, reply: ModelReply, sink: ReplyStream, seq: int
    ) -> Outcome | None:
        """Commit what the planner made of a reply (rows 11-14, 27); an outcome if it rests."""
        run = self.run
        match verdict:
            case RecordCalls(calls):
                await run.commit(
                    run.store.record_tool_calls,
                    run.claim,
                    status=run.status,
                    seq=seq,
                    parent=run.leaf(),
                    content=reply.content,
                    calls=calls,
                    usage=reply.usage,
                    ttl=run.runner.settings.lease_ttl_seconds,
                    finish_reason=reply.finish_reason,
                    reply_stream=sink.shape(),
                    model=run.model,
                )
                run.iterations += 1
                failpoints.hit("tool_calls_committed")
                return None
            case RecordAnswer(content, output):
                await run.commit(
                    run.store.record_answer,
                    run.claim,
                    status=run.status,
                    seq=seq,
                    parent=run.leaf(),
                    content=content,
                    usage=reply.usage,
                    finish_reason=reply.finish_reason,
                    reply_stream=sink.shape(),
                    model=run.model,
                    output=output,
                )
                failpoints.hit("final_committed")
                return Outcome.IDLE
            case RecordRefused(content, error):
                sink.abandon(REFUSED)  # (readers drop it: the model is asked again)
                await run.commit(
                    run.store.record_refused,
                    run.claim,
                    status=run.status,
                    seq=seq,
                    parent=run.leaf(),
                    content=content,
                    error=error,
                    usage=reply.usage,
                    ttl=run.runner.settings.lease_ttl_seconds,
                    finish_reason=reply.finish_reason,
                    model=run.model,
                )
                run.iterations += 1
                failpoints.hit("answer_refused")
                return None  # the planner asks for a repair, or fails the turn
            case Fail(error):
                sink.abandon(error)
                await run.fail(error, reply.usage)
                return Outcome.FAILED

    def _sink(self, stream: ReplySink) -> ReplySink:
        return stream if self.run.runner.broadcaster.channel is not None else NO_SINK


def _calls_taken(on_path: set[str], elsewhere: frozenset[str]) -> set[str] | frozenset[str]:
    """The call ids a new call's may not repeat: the path's and other branches' results'."""
    return on_path | elsewhere if elsewhere else on_path


__all__ = ["CANCELLED", "FAILED_CALL", "NOT_COMMITTED", "REFUSED", "ModelCaller", "Run"]
