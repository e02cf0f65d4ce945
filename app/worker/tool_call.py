"""The turn's tools: what the model is offered (built once a run, `offer.toolbox`), and running
one call of them, an MCP server's or the session cache's readers', its result committed as one
step. A call that may not simply run again is marked in flight first; a user's cancel aborts
the call in flight (the MCP server is told) and commits nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from app.models import BUILTIN_TOOL_NAMES
from app.telemetry import metrics, tracing
from app.worker import builtin, context, failpoints, offer, session_cache
from app.worker.arguments import ArgumentCheck
from app.worker.entry import ToolCall
from app.worker.in_flight import Aborted, InFlight
from app.worker.ports import CallRef, ToolResult, TurnStore
from app.worker.store import Claim, Committed, KeptOutput, Snapshot
from app.worker.threads import DatabaseThreads
from app.worker.transcript import Transcript

if TYPE_CHECKING:
    from app.worker.step_loop import Means


class Run(Protocol):
    """What the tool calls need of the run they serve (`step_loop.StepLoop`)."""

    runner: Means
    store: TurnStore
    db: DatabaseThreads
    snapshot: Snapshot
    claim: Claim
    transcript: Transcript
    in_flight: InFlight

    async def commit(self, write: Callable[..., Committed], *args: Any, **values: Any) -> None: ...

    async def record_result(
        self,
        call: ToolCall,
        content: str,
        is_error: bool,
        kept: KeptOutput | None = None,
        *,
        files: Sequence[dict[str, Any]] = (),
    ) -> None: ...


class ToolCaller:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.function_tools: list[dict[str, Any]] = []  # what the model is offered, built once
        self.toolbox = offer.NO_TOOLS
        self.tool_servers: dict[str, str] = {}  # the server of each offered tool (for traces)
        self._readers = False  # the session cache's readers are offered

    async def load(self) -> None:
        """What the turn offers the model, and what the planner checks its calls against."""
        run = self.run
        snapshot, settings = run.snapshot, run.runner.settings
        self._readers = self._cache_readable()
        allowed = snapshot.allowed_tools
        names = [*allowed, *(str(tool["name"]) for tool in snapshot.client_tools)]
        if not offer.uses_tools(names, snapshot.tool_choice):
            return  # the simple path: the model gets no tools, so one call answers
        own, action_kinds = builtin.toolset(
            snapshot.client_tools, snapshot.clarify and settings.clarify
        )
        readers = builtin.cache_definitions(settings.tool_context_chars)
        servers = await run.runner.tools.definitions()
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
        run.transcript.tools_tokens = context.text_tokens(json.dumps(self.function_tools))

    async def refresh(self) -> None:
        """Before a model call: an output was cut or elided since, so the readers serve now."""
        if self._readers != self._cache_readable():
            await self.load()

    def _cache_readable(self) -> bool:
        """Row 18: the cache's readers serve once what is sent refers to the cache."""
        return self.run.runner.settings.session_cache and self.run.transcript.refers_to_cache

    async def run_tool(
        self, call: ToolCall, arguments: dict[str, Any], mark_in_flight: bool
    ) -> None:
        """Run an MCP call and commit its result; a call that may not simply run again is
        marked in flight first. A user's cancel aborts it, and commits nothing."""
        run = self.run
        if mark_in_flight:
            ttl = run.runner.settings.lease_ttl_seconds
            await run.commit(run.store.starting, run.claim, call.id, ttl)
        started = time.monotonic()
        with tracing.tool_span(call.name, call.id, self.tool_servers.get(call.name)) as span:
            try:
                result = await run.in_flight.wait(
                    run.runner.tools.execute(
                        call.name, arguments, CallRef(run.claim.conversation_id, call.id)
                    )
                )
            except Aborted:
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
        run = self.run
        settings = run.runner.settings
        limit = settings.tool_context_chars
        kept_files: list[dict[str, Any]] = []
        if result.media:  # images, audio, blobs: kept whole, as files of the conversation
            kept_files = await run.db.run(
                run.store.keep_files, run.claim.conversation_id, result.media
            )
        if not settings.session_cache:
            content = session_cache.truncate(result.content, limit)
            await run.record_result(call, content, result.is_error, files=kept_files)
            return
        content = session_cache.compact(call.id, result.content, limit)
        kept = KeptOutput(arguments, result.content)
        await run.record_result(call, content, result.is_error, kept, files=kept_files)

    async def run_own(self, call: ToolCall, arguments: dict[str, Any]) -> None:
        """One of the worker's own tools, answered from the store and committed as its result."""
        result = await self._read_cache(call.name, arguments)
        await self.run.record_result(call, result.content, result.is_error)

    async def _read_cache(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """`session_cache_list` or `session_cache_get`, answered from the kept outputs."""
        run = self.run
        conversation_id = run.claim.conversation_id
        if name == session_cache.LIST:
            tool = arguments.get("tool")
            listed, total = await run.db.run(
                run.store.cached_outputs, conversation_id, tool=tool, limit=session_cache.LISTED
            )
            return session_cache.listing(listed, total, tool)
        request = session_cache.page_request(arguments, run.runner.settings.tool_context_chars)
        found = await run.db.run(
            run.store.cached_output,
            conversation_id,
            request.call_id,
            offset=request.offset,
            limit=request.limit,
        )
        return session_cache.page(request, found)


__all__ = ["Run", "ToolCaller"]
