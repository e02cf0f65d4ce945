"""A running turn's writes, each fenced by the epoch its claim granted: when the fence does not
match, another worker owns the conversation now, and `LeaseLost` is raised with nothing written.
Each call is one short transaction; none is held open across an LLM or tool call. Every write
also appends its events to the conversation's log and updates the turn it belongs to (`journal`),
in the same statement: the caller passes the status it last committed, so a step logs a
`status.changed` exactly when it changes the status, and gets the new status back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.models import TOOL_LOOP
from app.worker.plan import Entry, ToolCall
from app.worker.ports import Usage
from app.worker.store import fence, journal
from app.worker.store.clock import Clock
from app.worker.store.driver import Driver, Op, StepConflict
from app.worker.store.fence import StepKind, Write
from app.worker.store.records import (
    Claim,
    Committed,
    CompactionRecord,
    KeptOutput,
    LeaseLost,
    Steering,
    lost,
)


class StepWrites:
    """The fenced writes' part of `TurnStore` (its clock and driver are the store's)."""

    clock: Clock
    _driver: Driver

    def heartbeat(self, claim: Claim, ttl: float) -> Committed:
        """Renew the lease; raise `LeaseLost` if it was taken over. The result says whether the
        user asked to cancel the turn meanwhile."""
        return self._run(Write.HEARTBEAT, claim, ttl=ttl)

    def release(self, claim: Claim) -> None:
        """Give the lease up (graceful shutdown) so another worker may claim at once."""
        self._run(Write.RELEASE, claim)

    def record_tool_calls(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str | None,
        calls: Sequence[ToolCall],
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed:
        """The assistant's tool calls and status `tool_loop`, in one transaction (`reply_stream`:
        how the reply was streamed, `messages.reply_stream`; `model`: the one that answered)."""
        entry = Entry(seq, "assistant", content, tuple(calls), finish_reason=finish_reason)
        return self._step(
            StepKind.TOOL_CALLS,
            claim,
            status,
            entry,
            parent,
            ttl=ttl,
            usage=usage,
            reply=reply_stream,
            model=model,
        )

    def record_tool_result(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        call: ToolCall,
        content: str,
        is_error: bool,
        ttl: float,
        kept: KeptOutput | None = None,
        files: Sequence[dict[str, Any]] = (),
    ) -> Committed:
        """One tool result, in its own transaction; with `kept`, the call's whole output goes
        to the session tool cache (`tool_outputs`) in the same statement; `files`: the images
        and blobs it returned, kept (`keep_files`)."""
        entry = Entry(
            seq,
            "tool",
            content,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=is_error,
            files=tuple(files),
        )
        if kept is None:
            return self._step(StepKind.TOOL_RESULT, claim, status, entry, parent, ttl=ttl)
        extra = journal.output_parameters(kept.arguments, kept.content)
        return self._step(StepKind.TOOL_OUTPUT, claim, status, entry, parent, ttl=ttl, extra=extra)

    def record_answer(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        usage: Usage,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
        output: Any = None,
    ) -> Committed:
        """The final text; the turn completes and the conversation rests (`idle`) or moves on
        to the next waiting turn (`processing`), lease released, in one transaction (`output`:
        a structured answer's parsed object)."""
        entry = Entry(seq, "assistant", content, finish_reason=finish_reason)
        return self._step(
            StepKind.ANSWER,
            claim,
            status,
            entry,
            parent,
            usage=usage,
            reply=reply_stream,
            model=model,
            output=output,
        )

    def record_refused(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        error: str,
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed:
        """A structured answer that does not match its schema, kept with `is_error` (the
        planner asks the model to repair it once, or fails the turn), one call counted."""
        entry = Entry(
            seq, "assistant", content, is_error=True, finish_reason=finish_reason, refusal=error
        )
        return self._step(
            StepKind.REFUSED,
            claim,
            status,
            entry,
            parent,
            ttl=ttl,
            usage=usage,
            reply=reply_stream,
            model=model,
        )

    def fall_back(
        self,
        claim: Claim,
        *,
        from_model: str,
        to_model: str,
        error: str,
        ttl: float,
        usage: Usage | None = None,
    ) -> Committed:
        """The turn moves to `to_model` (`turns.model`, with `model.fallback` naming both and
        the error): one fenced statement, a step, so a resumed turn goes on with it."""
        data = {"from": from_model, "to": to_model, "error": error}
        values = {"fallback_model": to_model, "fallback_data": data}
        return self._run(
            Write.FALLBACK, claim, ttl=ttl, **values, **journal.usage_parameters(usage)
        )

    def finish(self, claim: Claim, *, status: str) -> Committed:
        """Complete the turn when its final text is already committed (no call counted)."""
        return self._run(Write.FINISH, claim, old_status=status, **journal.usage_parameters(None))

    def starting(self, claim: Claim, call_id: str, ttl: float) -> Committed:
        """Mark `call_id` as running (and renew the lease) before a call that may not simply
        run again: a later claim that finds it without a result knows it was in flight."""
        return self._run(Write.STARTING, claim, ttl=ttl, in_flight=call_id)

    def pause(self, claim: Claim, *, status: str, actions: Sequence[dict[str, Any]]) -> Committed:
        """The turn requires action (`actions`: what it waits for): the conversation rests
        (`idle`) with the turn still current, lease released, in one transaction."""
        return self._run(Write.PAUSE, claim, old_status=status, actions=list(actions))

    def compact(self, claim: Claim, record: CompactionRecord, *, ttl: float) -> Committed:
        """A compaction of what the model is sent (`record`), with its `context.compacted`
        event and a summary's usage, in one fenced statement: a step, so it renews the lease."""
        return self._run(Write.COMPACT, claim, ttl=ttl, **record.parameters())

    def steer(
        self,
        claim: Claim,
        steering: Steering,
        *,
        status: str,
        seq: int,
        parent: int | None,
        ttl: float,
    ) -> Committed:
        """Take the steer message in (plan row 26): the running turn ends `completed`, the
        message goes on the path, and the steer turn runs on under this lease, in one fenced
        statement. `claim` names the steer turn (the returned cancel flag is its)."""
        entry = Entry(seq, "user", steering.text, files=steering.files)
        steered = Claim(claim.conversation_id, claim.owner, claim.epoch, steering.turn_id)
        values = {
            "old_status": status,
            "ended_id": claim.turn_id,
            "steered_data": {"steered_into": str(steering.turn_id)},
            **journal.message_parameters(entry, parent),
        }
        committed = self._run(Write.STEER, steered, ttl=ttl, **values)
        return replace(committed, entry=entry)

    def cancel(self, claim: Claim, *, status: str) -> Committed:
        """End the turn `cancelled` once every call has an answer: the conversation rests
        (`idle`) or moves on to the next waiting turn (`processing`), lease released."""
        return self._run(Write.CANCEL, claim, old_status=status, **journal.usage_parameters(None))

    def fail(
        self, claim: Claim, error: str, *, status: str, usage: Usage | None = None
    ) -> Committed:
        """The turn fails with a readable error (lease released); a failed call's tokens count.
        The conversation is `failed`, or `processing` when another turn waits."""
        return self._run(
            Write.FAIL, claim, old_status=status, error=error, **journal.usage_parameters(usage)
        )

    def _run(self, op: Op, claim: Claim, ttl: float | None = None, **values: Any) -> Committed:
        parameters = fence.fence_parameters(
            claim.conversation_id, claim.epoch, now=self.clock(), ttl=ttl
        )
        found = self._driver.run(op, {**parameters, "turn_id": claim.turn_id, **values})
        if found is None:
            raise lost(claim)
        return Committed(
            found[_STATUS], None, found[_EVENT_SEQ], bool(found[_CANCEL]), found[_TURN_COUNT]
        )

    def _step(
        self,
        kind: StepKind,
        claim: Claim,
        status: str,
        entry: Entry,
        parent: int | None,
        *,
        ttl: float | None = None,
        usage: Usage | None = None,
        extra: dict[str, Any] | None = None,
        reply: dict[str, Any] | None = None,
        model: str | None = None,
        output: Any = None,
    ) -> Committed:
        """The fenced UPDATE, the entry's INSERT (below `parent`, the path's leaf) and their
        events, atomically: all, or nothing."""
        if status != TOOL_LOOP and kind in fence.ENTERING:
            kind = fence.ENTERING[kind]
        values = {
            "old_status": status,
            **journal.usage_parameters(usage),
            **journal.message_parameters(entry, parent, reply, usage, model=model, output=output),
            **(extra or {}),
        }
        try:
            committed = self._run(kind, claim, ttl=ttl, **values)
        except StepConflict as exc:
            # The fence passed, so only a writer that bypassed it could have taken this seq.
            raise LeaseLost(
                f"conversation {claim.conversation_id}: seq {entry.seq} already written"
            ) from exc
        return replace(committed, entry=entry)


# Positions in every head's row: fence.SOURCE, then fence.CANCEL_ASKED and the turn count.
_EVENT_SEQ, _STATUS, _CANCEL, _TURN_COUNT = 1, 2, 4, 5


__all__ = ["StepWrites"]
