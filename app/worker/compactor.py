"""Fitting what the model is sent to its window, before each model call of a run: acting on the
context budget's decisions (rows 19-25 of the planner, decided by `context.decide`), one
committed step per compaction (`TurnStore.compact`: the compaction and its `context.compacted`
event in one fenced statement), a summary written by a model call of its own, and the provider's
own overflow error (compact whatever the estimate said, then one more try).

The state it keeps is this run's only: the rules (the window an overflow taught included) and
whether the run compacted for an overflow already. Everything it sends by is committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from app.models import ELIDE, OVERFLOW, SUMMARY, THRESHOLD
from app.telemetry import tracing
from app.worker import context, failpoints, summary
from app.worker.context import Elide, Summarize, TooLarge
from app.worker.ports import ContextOverflow, ModelError, ModelReply, ModelRequest, TurnStore, Usage
from app.worker.store import Claim, Committed, CompactionRecord, Snapshot
from app.worker.transcript import Transcript

if TYPE_CHECKING:
    from app.worker.step_loop import Means

SUMMARY_FAILED = "Compacting the conversation's context failed: {error}"
MAX_COMPACTIONS = 8  # in a row before one model call: then the request goes as it is
OVERFLOW_GUESS = 0.9  # an overflow that states no window: a little under what was sent


class Run(Protocol):
    """What the compactor needs of the run it serves (`step_loop.StepLoop`)."""

    runner: Means
    store: TurnStore
    snapshot: Snapshot
    claim: Claim
    transcript: Transcript
    cancel_requested: bool
    model: str  # the model the turn calls now

    async def commit(self, write: Callable[..., Committed], *args: Any, **values: Any) -> None: ...

    async def fail(self, error: str, usage: Usage | None = None) -> None: ...

    async def ask_quietly(self, request: ModelRequest) -> ModelReply | None: ...


class Compactor:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.rules = context.Policy(None)  # what the requests must fit (`context_rules`)
        self._overflow: ContextOverflow | None = None  # the provider's, not yet compacted for
        self._retried = False  # this run compacted for an overflow already

    def context_rules(self, window: int | None = None) -> context.Policy:
        """What this conversation's requests must fit: its model's window (or `window`, what
        an overflow taught), the settings and the conversation's own policy."""
        run = self.run
        found = window or run.runner.model.context_window(run.model)
        return context.policy(run.runner.settings, run.snapshot.context_policy, found)

    def overflowed(self, overflow: ContextOverflow) -> None:
        """The provider refused the request as too long: the next `fit` compacts (row 25)."""
        self._overflow = overflow

    async def fit(self) -> bool:
        """Compact what the model is sent until the next request fits, one committed step per
        compaction. True when the turn failed instead (it cannot fit, or no summary came); a
        cancel during a summary ends the fitting (the run's `cancel_requested` says so)."""
        transcript = self.run.transcript
        for _ in range(MAX_COMPACTIONS):
            overflow = self._overflow
            if overflow is not None and not self._retried:
                self.rules = self._overflowed_rules(overflow)
            size = transcript.size(self.rules, overflowed=overflow is not None)
            decision = context.decide(
                size,
                self.rules,
                transcript.compacted,
                overflowed=overflow is not None,
                retried=self._retried,
                overflow_detail=str(overflow or ""),
            )
            reason = OVERFLOW if overflow is not None else THRESHOLD
            match decision:
                case None:
                    return False
                case TooLarge(error):
                    await self.run.fail(error)
                    return True
                case Elide(from_seq, through):
                    state = transcript.compacted
                    state = state._replace(number=state.number + 1, elided_through=through)
                    window = self.rules.window
                    await self._record(
                        CompactionRecord(ELIDE, reason, from_seq, through, state, 0, 0, window)
                    )
                case Summarize(from_seq, through):
                    failed = await self._summarize(from_seq, through, reason)
                    if failed or self.run.cancel_requested:
                        return failed
            if overflow is not None:
                self._overflow, self._retried = None, True
        return False

    def _overflowed_rules(self, overflow: ContextOverflow) -> context.Policy:
        """After the provider's overflow: its stated window, else a little under what was sent
        (the estimate of the request it refused), for the rest of this run."""
        window = overflow.window or self.rules.window
        if window is None:
            window = int(self.run.transcript.estimate() * OVERFLOW_GUESS)
        return self.context_rules(window)

    async def _summarize(self, from_seq: int, through: int, reason: str) -> bool:
        """Ask the model for a summary of messages `from_seq..through`, then commit it as the
        conversation's latest compaction. True when the turn failed (no summary came)."""
        run, compacted = self.run, self.run.transcript.compacted
        model = self.rules.summary_model or run.model
        request = ModelRequest(
            model=model,
            messages=summary.request_messages(
                compacted.summary,
                run.transcript.between(from_seq, through),
                compacted.elided_through,
                context.summary_tokens(self.rules),
            ),
        )
        with tracing.model_span(model) as span:
            span.set_attribute("chatworker.compaction", True)
            try:
                reply = await run.ask_quietly(request)
            except ModelError as exc:
                tracing.failed(span, str(exc), "ModelError")
                await run.fail(SUMMARY_FAILED.format(error=exc))
                return True
        if reply is None:
            return False  # cancelled: the planner ends the turn
        failpoints.hit("compaction_summarized")
        text = summary.summary_text(reply.content)
        if text is None:
            await run.fail(summary.EMPTY_SUMMARY_ERROR, reply.usage)
            return True
        state = compacted._replace(
            number=compacted.number + 1, summarized_through=through, summary=text
        )
        window = self.rules.window
        record = CompactionRecord(SUMMARY, reason, from_seq, through, state, 0, 0, window)
        await self._record(record._replace(model=model, usage=reply.usage))
        return False

    async def _record(self, record: CompactionRecord) -> None:
        """Commit a compaction (a fenced step with `context.compacted`), then send by it; its
        sizes are the estimate before and after (the same scale)."""
        run = self.run
        before = run.transcript.estimate(measured=False)
        run.transcript.compact(record.compacted)
        after = run.transcript.estimate(measured=False)
        record = record._replace(tokens_before=before, tokens_after=after)
        ttl = run.runner.settings.lease_ttl_seconds
        await run.commit(run.store.compact, run.claim, record, ttl=ttl)
        failpoints.hit("compacted")


__all__ = ["MAX_COMPACTIONS", "SUMMARY_FAILED", "Compactor", "Run"]
